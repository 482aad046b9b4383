"""A run folder's tiny model is made once; a resume that asks for another one is refused."""

from __future__ import annotations

import pytest

from swerl.models.tiny import TinyModelConfig
from swerl.curriculum.config import CurriculumConfig
from swerl.orchestration.inputs import curriculum_inputs, tiny_model

SMALL = TinyModelConfig(vocab_size=512, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                        intermediate_size=32)


def _tasks(folder, seed: int, warmup: int):
    """A generated curriculum's warm-up split: real task records whose texts join the tokenizer's corpus."""
    return curriculum_inputs(folder, CurriculumConfig(seed=seed, warmup=warmup, train=1, heldout=1))["warmup"]


def test_the_same_config_reuses_the_model_and_another_is_refused_naming_what_differs(tmp_path):
    folder = tmp_path / "run" / "start-model"
    corpus = _tasks(tmp_path / "c0", 0, 2)
    assert tiny_model(folder, SMALL, corpus) == folder
    weights = (folder / "model.safetensors").read_bytes()
    assert tiny_model(folder, SMALL, corpus) == folder and (folder / "model.safetensors").read_bytes() == weights
    with pytest.raises(ValueError) as refused:
        tiny_model(folder, SMALL.model_copy(update={"seed": 3}), corpus)
    assert "seed=0 (asked 3)" in str(refused.value) and f"delete {folder.parent}" in str(refused.value)
    with pytest.raises(ValueError, match="a tokenizer corpus of 2 task texts \\(asked 1\\)"):
        tiny_model(folder, SMALL, _tasks(tmp_path / "c1", 0, 1))
    with pytest.raises(ValueError, match="a tokenizer corpus of 2 task texts \\(asked 2 other ones\\)"):
        tiny_model(folder, SMALL, _tasks(tmp_path / "c2", 1, 2))
    assert (folder / "model.safetensors").read_bytes() == weights  # nothing rewritten
