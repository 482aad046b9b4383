"""The tiny default policy: a Qwen2-architecture model and a tokenizer trained offline, which the
Auto classes load like any Qwen2.5 checkpoint, with the same ids the tokenizer was trained with."""

from __future__ import annotations

import json
import unicodedata

import pytest
import torch
from pydantic import ValidationError
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
from typer.testing import CliRunner

from swerl.cli import app
from swerl.models import TinyModelConfig, init_tiny

# Each kind of text where a tokenizer rebuilt with another pipeline would part ways with the
# trained one: code and indentation, runs of spaces and blank lines, tabs, CRLF, digits (Qwen2
# splits them one by one), contractions, non-Latin scripts, a ligature and a decomposed accent
# (NFC composes them), emoji, and special tokens in the middle of text.
SAMPLES = [
    "def add(a, b):\n    return a + b\n\n\nclass Foo(Bar):\n\tpass\n",
    "x = 1234567890  # ints: 0x1F, 3.14e-10\r\n",
    "She'll say it's done; we've   seen    it.\n\n\n   \n",
    "naïve café, Ünïcödé — 日本語のテキスト, Русский текст, ﬁnal e\u0301tude 🙂🚀",
    "diff --git a/x.py b/x.py\n@@ -1,3 +1,4 @@\n-    old()\n+    new()  \n",
    "<|im_start|>user\nfix the bug<|im_end|>\n<|im_start|>assistant\n",
    "   leading spaces and trailing spaces   ",
    "",
]


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def raw(tiny_model_dir) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))


def test_the_auto_classes_load_a_float32_qwen2_model_and_the_qwen2_tokenizer(tiny_model_dir, tok):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert type(tok).__name__ == "Qwen2Tokenizer"
    assert model.dtype == torch.float32
    # embedding 4096 * 64 = 262,144 (tied with the output head)
    # + per layer: q 64*64+64, k and v 64*32+32 each, o 64*64, MLP 3 * 64*256, two norms 2*64 = 61,696
    # * 2 layers + final norm 64 = 385,600
    assert sum(p.numel() for p in model.parameters()) == 385_600
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert len(tok) == 4096 == model.config.vocab_size
    assert tok.model_max_length == 32768 == model.config.max_position_embeddings


def test_the_model_card_records_the_config_size_and_corpus(tiny_model_dir):
    card = json.loads((tiny_model_dir / "swerl_model.json").read_text())
    assert card["config"] == TinyModelConfig().model_dump()
    assert (card["parameters"], card["vocab_size"]) == (385_600, 4096)
    assert len(card["tokenizer_corpus"]["sha256"]) == 64


def test_special_tokens_sit_after_the_vocabulary_as_in_qwen2_5(tiny_model_dir, tok):
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [4093, 4094, 4095]
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert len(tok(special)["input_ids"]) == 1
    config = AutoConfig.from_pretrained(tiny_model_dir)
    assert (config.eos_token_id, config.pad_token_id, config.bos_token_id) == (4095, 4093, None)


@pytest.mark.parametrize("text", SAMPLES)
def test_auto_tokenizer_gives_the_ids_the_tokenizer_was_trained_with(tok, raw, text):
    # transformers rebuilds Qwen2's pipeline from vocab + merges; a tokenizer trained with any
    # other pipeline would load fine and silently give other ids.
    ids = tok(text)["input_ids"]
    assert ids == raw.encode(text).ids
    assert tok.decode(ids) == unicodedata.normalize("NFC", text)


def test_digits_are_split_one_by_one_and_nfc_composes_accents(tok):
    assert tok.tokenize("2025") == ["2", "0", "2", "5"]
    assert tok("e\u0301")["input_ids"] == tok("\u00e9")["input_ids"]


def test_no_special_token_is_added_around_plain_text(tok, raw):
    assert tok("hello")["input_ids"] == raw.encode("hello", add_special_tokens=False).ids


MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Fix the bug."},
    {"role": "assistant", "content": "```bash\nls\n```"},
]


def test_the_chat_template_renders_chatml_messages_as_given(tok):
    assert tok.apply_chat_template(MESSAGES, tokenize=False) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nFix the bug.<|im_end|>\n"
        "<|im_start|>assistant\n```bash\nls\n```<|im_end|>\n"
    )


def test_the_generation_prompt_opens_the_assistant_turn(tok):
    user = MESSAGES[1:2]
    text = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nFix the bug.<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.apply_chat_template(user, tokenize=True, add_generation_prompt=True)["input_ids"]
    assert ids == tok(text)["input_ids"]
    assert ids[0] == 4094 and ids.count(4095) == 1


def test_generation_config_mimics_qwen2_5_instruct_so_engines_must_override_it(tiny_model_dir):
    gen = GenerationConfig.from_pretrained(tiny_model_dir)
    assert (gen.do_sample, gen.temperature, gen.top_p, gen.top_k, gen.repetition_penalty) == (True, 0.7, 0.8, 20, 1.05)
    assert gen.eos_token_id == [4095, 4093]


def test_a_forward_pass_gives_one_row_of_logits_per_token(tiny_model_dir, tok):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    ids = tok("def f(x):\n    return x\n", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 4096)
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


def test_the_same_config_writes_the_same_bytes_and_another_seed_other_weights(tiny_model_dir, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["model", "init-tiny", "--out", str(tmp_path / "same")])
    assert result.exit_code == 0, result.output
    assert "385,600 parameters, vocab 4096" in result.output
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "model.safetensors"):
        assert (tmp_path / "same" / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name

    other = init_tiny(tmp_path / "other", TinyModelConfig(seed=1))
    assert (other / "tokenizer.json").read_bytes() == (tiny_model_dir / "tokenizer.json").read_bytes()
    assert (other / "model.safetensors").read_bytes() != (tiny_model_dir / "model.safetensors").read_bytes()


def test_the_cli_refuses_a_non_empty_folder_without_force(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    result = CliRunner().invoke(app, ["model", "init-tiny", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert f"--out {tmp_path} is not empty; pass --force to replace it" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_init_tiny_refuses_a_non_empty_folder_unless_told_to_overwrite(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="is not empty"):
        init_tiny(tmp_path)


def test_the_config_rejects_unknown_fields_and_heads_that_do_not_divide():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        TinyModelConfig(hidden_layers=3)
    with pytest.raises(ValidationError, match="num_attention_heads=5 must divide hidden_size=64"):
        TinyModelConfig(num_attention_heads=5)
    with pytest.raises(ValidationError, match="num_key_value_heads=3 must divide num_attention_heads=4"):
        TinyModelConfig(num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(ValidationError, match="greater than or equal to 512"):
        TinyModelConfig(vocab_size=100)


def test_extra_texts_give_in_domain_identifiers_whole_tokens(tmp_path, tok):
    text = ">>> from quokkalytics.zebraworks import frobnicate_widget\n"
    domain = init_tiny(tmp_path / "domain", TinyModelConfig(), extra_texts=[text * 50])
    from transformers import AutoTokenizer

    in_domain = AutoTokenizer.from_pretrained(domain)
    assert len(in_domain.encode(" quokkalytics")) == 1 < len(tok.encode(" quokkalytics"))
    assert json.loads((domain / "swerl_model.json").read_text())["tokenizer_corpus"]["extra_texts"] == 1
