"""Shipping a pipeline run's warm-started policy into the repository, and checking what was shipped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from swerl.models.shipped import POLICY_FILES, RECIPE, ShipError, check_shipped, ship_policy, weight_gap
from swerl.tracking.lineage import file_digest


def fake_run(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """A run folder whose warm start finished: train/final links to a checkpoint with trainer state beside the model."""
    step = tmp_path / "run" / "warm-start" / "train" / "step-000012"
    shutil.copytree(tiny_model_dir, step)
    (step / "trainer_state").mkdir()
    (step / "trainer_state" / "optimizer.pt").write_bytes(b"state")
    (step.parent / "final").symlink_to(step.name)
    return tmp_path / "run"


def test_shipping_copies_the_loadable_files_and_records_their_digests_and_the_recipe(tmp_path, tiny_model_dir):
    recipe_file = tmp_path / "warm-start.yaml"
    recipe_file.write_text("name: warm-start-s0\n", encoding="utf-8")
    made = ship_policy(fake_run(tmp_path, tiny_model_dir), tmp_path / "shipped", recipe_file, "bash make.sh", 1e-5)
    assert sorted(p.name for p in (tmp_path / "shipped").iterdir()) == sorted([*POLICY_FILES, RECIPE])
    assert (made["command"], made["checkpoint"], made["tolerance"]) == ("bash make.sh", "step-000012", 1e-5)
    assert made["recipe_sha256"] == file_digest(recipe_file)
    assert made["files"] == {name: file_digest(tiny_model_dir / name) for name in POLICY_FILES}
    assert json.loads((tmp_path / "shipped" / RECIPE).read_text()) == made
    assert check_shipped(tmp_path / "shipped") == made
    assert weight_gap(tmp_path / "shipped", tiny_model_dir) == 0.0


def test_a_changed_or_added_file_in_the_shipped_folder_is_refused_with_the_remake_command(tmp_path, tiny_model_dir):
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text("x: 1\n", encoding="utf-8")
    shipped = tmp_path / "shipped"
    ship_policy(fake_run(tmp_path, tiny_model_dir), shipped, recipe_file, "bash make.sh", 0.0)
    (shipped / "config.json").write_text("{}", encoding="utf-8")
    (shipped / "notes.txt").write_text("by hand", encoding="utf-8")
    with pytest.raises(ShipError, match=r"changed or missing \['config.json'\], not made by it \['notes.txt'\]; remake it with bash make.sh$"):
        check_shipped(shipped)


def test_a_run_without_a_finished_warm_start_names_the_recipe_to_run(tmp_path):
    with pytest.raises(ShipError, match=r"has no finished warm start .*swerl pipeline run --params deployments/warm-start.yaml"):
        ship_policy(tmp_path, tmp_path / "out", tmp_path / "r.yaml", "c", 0.0)


def test_the_weight_gap_is_the_largest_difference_of_any_tensor(tmp_path, tiny_model_dir, trained_checkpoint):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tiny_model_dir / "model.safetensors"))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[3] += 0.25
    (tmp_path / "moved").mkdir()
    save_file(tensors, str(tmp_path / "moved" / "model.safetensors"))
    assert weight_gap(tmp_path / "moved", tiny_model_dir) == pytest.approx(0.25, abs=1e-6)
    assert weight_gap(trained_checkpoint, tiny_model_dir) > 0.1
