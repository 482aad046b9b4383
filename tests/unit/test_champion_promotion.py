"""`champion` moves only to a version whose Pass@1 is strictly better, or when forced; the real
MLflow registry on SQLite."""

from __future__ import annotations

import json
import uuid

import pytest

from swerl.orchestration.recording import PASS_AT_1_TAG, promote_if_better
from swerl.tracking import TrackingConfig
from swerl.tracking.mlflow_tracker import Tracker


@pytest.fixture(autouse=True)
def _sync_logging(monkeypatch):
    monkeypatch.delenv("MLFLOW_ENABLE_ASYNC_LOGGING", raising=False)


@pytest.fixture
def registry(tmp_path):
    """A tracker whose registered model has three versions (weights 0, 1, 2)."""
    import numpy as np
    from safetensors.numpy import save_file

    unique = uuid.uuid4().hex[:8]
    tracker = Tracker(TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment=f"exp-{unique}",
                                     registered_model=f"policy-{unique}", artifact_location=str(tmp_path / "artifacts")))
    run = tracker.pipeline_run("champion")
    versions = []
    for n in range(3):
        folder = tmp_path / f"ckpt-{n}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 4}))
        save_file({"w": np.full((2, 2), float(n), dtype=np.float32)}, str(folder / "model.safetensors"))
        versions.append(tracker.register(tracker.log_checkpoint(run, folder, name=f"ckpt-{n}")))
    return tracker, versions


def test_the_first_evaluated_version_becomes_champion(registry):
    tracker, (v1, _, _) = registry
    assert promote_if_better(tracker, v1, 0.25) is True
    assert tracker.alias_version("champion") == v1
    assert tracker.client.get_model_version(tracker.config.registered_model, v1).tags[PASS_AT_1_TAG] == "0.250000"


def test_a_tie_or_worse_keeps_the_champion_and_strictly_better_moves_it(registry):
    tracker, (v1, v2, v3) = registry
    promote_if_better(tracker, v1, 0.25)
    assert promote_if_better(tracker, v2, 0.25) is False  # no better: not worth a move
    assert promote_if_better(tracker, v2, 0.2) is False
    assert promote_if_better(tracker, v2, 0.25 + 1e-9) is False  # a difference below the tag's precision is a tie
    assert tracker.alias_version("champion") == v1
    assert promote_if_better(tracker, v3, 0.5) is True
    assert tracker.alias_version("champion") == v3


def test_force_moves_the_champion_whatever_the_pass_at_1(registry):
    tracker, (v1, v2, _) = registry
    promote_if_better(tracker, v1, 0.5)
    assert promote_if_better(tracker, v2, 0.1, force=True) is True
    assert tracker.alias_version("champion") == v2
