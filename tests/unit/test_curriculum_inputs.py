"""A run folder's curriculum is generated once; a resume that asks for another one is refused."""

from __future__ import annotations

import json

import pytest

from swerl.curriculum.config import CurriculumConfig
from swerl.orchestration.inputs import curriculum_inputs


def test_the_same_config_reuses_the_folder_and_another_is_refused_naming_the_fields(tmp_path):
    folder = tmp_path / "run" / "curriculum"
    config = CurriculumConfig(seed=0, warmup=1, train=1, heldout=1)
    first = curriculum_inputs(folder, config)
    written = first["heldout"].read_text()
    assert curriculum_inputs(folder, config) == first and first["heldout"].read_text() == written
    with pytest.raises(ValueError) as refused:
        curriculum_inputs(folder, config.model_copy(update={"heldout": 2, "seed": 1}))
    message = str(refused.value)
    assert "heldout=1, seed=0" in message and "heldout=2, seed=1" in message
    assert f"delete {folder.parent}" in message
    assert json.loads((folder / "curriculum.json").read_text())["counts"]["heldout"] == 1  # nothing rewritten
    assert first["heldout"].read_text() == written
