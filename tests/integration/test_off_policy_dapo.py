"""An off-policy DAPO update on the tiny policy (torch, CPU): data up to ``max_staleness`` versions behind the
update's start is trained on with the starting model's own log-probs as the proximal policy, older data is left out
and counted, the proximal log-probs are kept for a resume, and a synchronous update still refuses stale data."""

from __future__ import annotations

import json

import pytest
import torch
from test_train_cli import make_traj  # tests/integration is on sys.path (pytest's prepend import mode)

from swerl.rollout.store import TrajectoryStore
from swerl.stages.errors import StageInputError
from swerl.stages.train import DAPOStage, OffPolicyConfig, train_dapo
from swerl.train.proximal import PROX_FILE

pytestmark = pytest.mark.slow

START = "dapo-2"  # the update starts from the moved checkpoint; the data was sampled by the tiny model


@pytest.fixture(scope="module")
def store(tiny_model_dir, tok, tmp_path_factory):
    """Groups a (dapo-1: one version behind), b (dapo-2: the start's own) and c (rft: two behind), each one resolved
    run and one not; every log-prob the tiny model's."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    folder = tmp_path_factory.mktemp("off-policy") / "trajectories"
    store = TrajectoryStore(folder)
    for iid, version in (("a", "dapo-1"), ("b", "dapo-2"), ("c", "rft")):
        store.append(make_traj(tok, model, iid, 0, True, version=version))
        store.append(make_traj(tok, model, iid, 1, False, version=version))
    return folder


def stage(store, model, out, max_staleness: int, dtype: str = "auto", trainer: dict | None = None) -> DAPOStage:
    return DAPOStage(trajectories=[store], model=str(model), out=out, require_version=START, iteration=2,
                     off_policy=OffPolicyConfig(max_staleness=max_staleness), reward={"length_penalty": False},
                     train={"epochs": 1, "batch_size": 4, "optimizer": {"lr": 1e-3, "warmup_steps": 0}, "dtype": dtype,
                            "trainer": trainer or {"backend": "torch", "device": "cpu"}, "max_tokens_per_microbatch": 512})


def test_stale_data_within_the_bound_trains_against_the_start_s_own_log_probs(store, trained_checkpoint, tmp_path):
    from transformers import AutoModelForCausalLM

    from swerl.rl.logprobs import sequence_action_logprobs
    from swerl.train.data import read_trajectories

    out = tmp_path / "update"
    outcome = train_dapo(stage(store, trained_checkpoint, out, max_staleness=1))
    assert outcome.steps == 1 and outcome.final is not None
    # c (two versions behind) left out and counted; a (1 behind) and b (0) kept: mean staleness 0.5
    assert (outcome.data["stale_dropped"], outcome.data["staleness_mean"], outcome.data["trajectories"]) == (2.0, 0.5, 4.0)
    # the proximal log-probs: only the stale rows', computed with the start (the moved checkpoint), kept for a resume
    kept = json.loads((out / PROX_FILE).read_text())
    assert sorted(kept) == ["a/0", "a/1"]
    start = AutoModelForCausalLM.from_pretrained(trained_checkpoint, dtype=torch.float32).eval()
    behaviour = {t.trajectory_id: t for t in read_trajectories([store])}
    for tid, prox in kept.items():
        t = behaviour[tid]
        ids = torch.tensor([t.prompt_ids + t.response_ids])
        mask = torch.tensor([[0] * len(t.prompt_ids) + t.action_mask], dtype=torch.bool)
        with torch.no_grad():
            expected, _ = sequence_action_logprobs(start, ids, mask)
        assert prox == pytest.approx(expected[0].tolist(), abs=1e-6)
        # the start is not the sampler: the importance weights are not all 1
        assert prox[len(t.prompt_ids):] != pytest.approx(t.logprobs, abs=1e-3)
    step = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert step["is_weight_mean"] != 1.0 and 0.0 <= step["is_truncated_frac"] <= 1.0
    run = json.loads((out / "run.json").read_text())
    assert run["max_staleness"] == 1  # a resume under another bound is refused
    # a rerun finds the update finished and recomputes nothing
    written = (out / PROX_FILE).stat().st_mtime_ns
    again = train_dapo(stage(store, trained_checkpoint, out, max_staleness=1))
    assert again.new_steps == 0 and (out / PROX_FILE).stat().st_mtime_ns == written


def test_a_synchronous_update_still_refuses_data_of_another_version(store, trained_checkpoint, tmp_path):
    with pytest.raises(StageInputError, match="stale data"):
        train_dapo(stage(store, trained_checkpoint, tmp_path / "sync", max_staleness=0))


def test_the_proximal_pass_computes_in_the_trainers_own_dtype(store, trained_checkpoint, tmp_path):
    """A trainer computing in bfloat16 (a GPU's 'auto') gets its proximal log-probs under the same autocast, so the
    importance weight compares like with like; here on the CPU, against the float32 pass of the test above."""
    exact, half = (json.loads((train_dapo(stage(store, trained_checkpoint, tmp_path / dtype, 1, dtype)).out / PROX_FILE)
                              .read_text()) for dtype in ("float32", "bfloat16"))
    assert sorted(half) == sorted(exact) == ["a/0", "a/1"]
    for tid in exact:
        assert half[tid] == pytest.approx(exact[tid], rel=0.1, abs=0.01) and half[tid] != pytest.approx(exact[tid], abs=1e-5)


def test_a_zero3_trainer_computes_the_proximal_pass_through_its_partitions(store, trained_checkpoint, tmp_path):
    """DeepSpeed ZeRO-3 (one process on the CPU, in a process of its own as DeepSpeed's process group wants) computes
    the proximal log-probs with its partitioned model before its first step: those of the float32 torch pass."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    exact = json.loads((train_dapo(stage(store, trained_checkpoint, tmp_path / "torch", 1, "float32")).out / PROX_FILE)
                       .read_text())
    zero3 = stage(store, trained_checkpoint, tmp_path / "zero3", 1, "float32", {"backend": "deepspeed", "zero_stage": 3})
    (tmp_path / "stage.json").write_text(zero3.model_dump_json())
    code = ("import sys; from swerl.stages.train import DAPOStage, train_dapo; "
            "train_dapo(DAPOStage.model_validate_json(open(sys.argv[1]).read()))")
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR",
                                                                str(Path.home() / ".cache/swerl/torch_extensions"))}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "stage.json")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    sharded = json.loads((tmp_path / "zero3" / PROX_FILE).read_text())
    assert sorted(sharded) == sorted(exact) == ["a/0", "a/1"]
    for tid in exact:
        assert sharded[tid] == pytest.approx(exact[tid], abs=1e-5)
