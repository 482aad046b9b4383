"""A byte-level BPE tokenizer trained offline, built exactly the way transformers' Qwen2Tokenizer is.

Why "exactly": in transformers 5, ``AutoTokenizer`` on a ``Qwen2Tokenizer`` folder keeps only
the vocabulary and merges of ``tokenizer.json`` and rebuilds the normalizer, pre-tokenizer and
decoder itself. A tokenizer trained with any other pipeline would load without complaint and
then give other ids than the ones it was trained with. So the pipeline below is Qwen2's, and the
split regex is imported from transformers rather than copied.

Special tokens follow Qwen2.5: they come after the BPE vocabulary, ``<|endoftext|>`` first
(padding), then ``<|im_start|>`` and ``<|im_end|>`` (end of a chat turn, the model's eos).
``tokenizer_config.json`` names each of them by id, because transformers would otherwise re-add
them in its own order (eos first) and shift their ids.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from importlib import resources
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, trainers
from tokenizers.models import BPE
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

from swerl.demo.materialize import TASKS_ROOT

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)

# Standard-library modules added to the demo tasks so that the merges cover everyday Python
# (argument parsing, subprocesses, tests, typing), English docstrings and error messages.
# A fixed list, so the corpus changes only with the interpreter's minor version.
STDLIB_MODULES = (
    "argparse.py", "collections/__init__.py", "csv.py", "dataclasses.py", "difflib.py", "enum.py",
    "functools.py", "json/__init__.py", "json/decoder.py", "json/encoder.py", "logging/__init__.py",
    "pathlib.py", "shlex.py", "shutil.py", "string.py", "subprocess.py", "tempfile.py", "textwrap.py",
    "typing.py", "unittest/case.py",
)


def corpus_files() -> list[Path]:
    """The training corpus, in a fixed order: every file of the demo tasks, then the stdlib modules above."""
    demo = sorted(p for p in TASKS_ROOT.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    # An interpreter shipped without sources trains on the demo tasks alone; the corpus digest
    # recorded next to the model tells the two apart.
    return demo + [stdlib / name for name in STDLIB_MODULES if (stdlib / name).is_file()]


def corpus_digest(texts: list[str]) -> str:
    h = hashlib.sha256()
    for text in texts:
        h.update(hashlib.sha256(text.encode()).digest())
    return h.hexdigest()


def qwen2_tokenizer(bpe: BPE) -> Tokenizer:
    """``bpe`` wrapped in Qwen2Tokenizer's pipeline: NFC, split by Qwen2's regex, then bytes; no post-processor."""
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(vocab_size: int, texts: list[str]) -> Tokenizer:
    """Train BPE on ``texts`` up to ``vocab_size`` tokens in all, the three special tokens included.

    Deterministic: the trainer breaks ties between equally frequent pairs by token id, and
    the ids of the 256 byte symbols are fixed by the initial alphabet.
    """
    tok = qwen2_tokenizer(BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                              fuse_unk=False, byte_fallback=False))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS), min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[],
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # Added after training so that they sit after the vocabulary, as in Qwen2.5.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tok


def chat_template() -> str:
    return (resources.files("swerl.models") / "resources" / "chat_template.jinja").read_text(encoding="utf-8")


def save_tokenizer(tok: Tokenizer, out: Path, model_max_length: int) -> None:
    """Write tokenizer.json, tokenizer_config.json and chat_template.jinja as Qwen2.5 ships them."""
    tok.save(str(out / "tokenizer.json"))
    added = {
        str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": True}
        for t in SPECIAL_TOKENS
    }
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": IM_END,
        "errors": "replace",
        "extra_special_tokens": [IM_START, IM_END],
        "model_max_length": model_max_length,
        "pad_token": PAD_TOKEN,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / "chat_template.jinja").write_text(chat_template(), encoding="utf-8")
