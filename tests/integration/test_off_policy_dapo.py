"""An off-policy DAPO update on the tiny policy (torch, CPU): data up to ``max_staleness`` versions behind the
update's start is trained on with the starting model's own log-probs as the proximal policy, older data is left out
and counted, the proximal log-probs are kept for a resume, and a synchronous update still refuses stale data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_train_cli import make_traj  # tests/integration is on sys.path (pytest's prepend import mode)

from swerl.rollout.store import TrajectoryStore
from swerl.stages.errors import StageInputError
from swerl.stages.train import DAPOStage, OffPolicyConfig, train_dapo
from swerl.train.proximal import PROX_FILE

pytestmark = pytest.mark.slow

ZERO3 = {"backend": "deepspeed", "zero_stage": 3}
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


def stage(store, model, out, max_staleness: int, dtype: str = "auto", trainer: dict | None = None, **train) -> DAPOStage:
    return DAPOStage(trajectories=[store], model=str(model), out=out, require_version=START, iteration=2,
                     off_policy=OffPolicyConfig(max_staleness=max_staleness), reward={"length_penalty": False},
                     train={"epochs": 1, "batch_size": 4, "optimizer": {"lr": 1e-3, "warmup_steps": 0}, "dtype": dtype,
                            "trainer": trainer or {"backend": "torch", "device": "cpu"}, "max_tokens_per_microbatch": 512,
                            **train})


def launched(stage_config: DAPOStage, where: Path, nproc: int = 1) -> None:
    """Run the update in processes of its own (DeepSpeed's process group wants them): one plain process, or ``nproc``
    under torchrun, each running ``swerl.stages.train_worker`` on the stage's JSON."""
    import subprocess
    import sys

    from test_trainers import env  # DeepSpeed's compiled op, cached where every run finds it

    where.write_text(stage_config.model_dump_json())
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)] \
        if nproc > 1 else [sys.executable]
    done = subprocess.run([*launcher, "-m", "swerl.stages.train_worker", "dapo", str(where)], env=env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


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
    """DeepSpeed ZeRO-3 (one process on the CPU) computes the proximal log-probs with its partitioned model before its
    first step: those of the float32 torch pass."""
    exact = json.loads((train_dapo(stage(store, trained_checkpoint, tmp_path / "torch", 1, "float32")).out / PROX_FILE)
                       .read_text())
    launched(stage(store, trained_checkpoint, tmp_path / "zero3", 1, "float32", ZERO3), tmp_path / "stage.json")
    sharded = json.loads((tmp_path / "zero3" / PROX_FILE).read_text())
    assert sorted(sharded) == sorted(exact) == ["a/0", "a/1"]
    for tid in exact:
        assert sharded[tid] == pytest.approx(exact[tid], abs=1e-5)


def test_two_zero3_processes_each_compute_the_proximal_pass_and_a_resume_reads_it_back(store, trained_checkpoint, tmp_path):
    """Under torchrun, two ZeRO-3 processes (gloo on the CPU), each row a micro-batch of its own so that both take stale
    rows: each process computes the proximal log-probs through the partitions before the first step, and the step's
    loss, importance weights, clipping and gradient norm, reduced over both, are a float32 torch update's. Raising the
    epochs resumes the run on both processes from its checkpoint: the kept values are read back, not recomputed with
    the weights trained since, and the second step is an uninterrupted torch run's second step."""
    from safetensors.torch import load_file

    # adam_eps 1e-6, as tests/integration/test_trainers.py has it: a few weights' gradients are zero in exact arithmetic,
    # and a smaller eps turns their float noise, which depends on the summation order, into steps of up to lr
    each_row_alone = {"max_tokens_per_microbatch": 96,
                      "optimizer": {"lr": 1e-3, "adam_eps": 1e-6, "warmup_steps": 0, "lr_schedule": "constant"}}
    torch_one, torch_two = (train_dapo(stage(store, trained_checkpoint, tmp_path / f"torch-{n}", 1, "float32", epochs=n,
                                             **each_row_alone)) for n in (1, 2))
    out = tmp_path / "zero3-2proc"
    launched(stage(store, trained_checkpoint, out, 1, "float32", ZERO3, **each_row_alone), tmp_path / "one.json", nproc=2)
    kept = out / PROX_FILE
    exact, sharded = (json.loads(path.read_text()) for path in (torch_one.out / PROX_FILE, kept))
    assert sorted(sharded) == sorted(exact) == ["a/0", "a/1"]
    for tid in exact:
        assert sharded[tid] == pytest.approx(exact[tid], abs=1e-5)
    [first] = steps_of(out)
    assert first["microbatches"] == 4.0 and first["is_weight_mean"] != 1.0  # both processes' rows, stale ones weighted
    assert same_step(first, steps_of(torch_one.out)[0], rel=1e-6)

    def gap(a: Path, b: Path) -> float:
        wa, wb = load_file(a / "final" / "model.safetensors"), load_file(b / "final" / "model.safetensors")
        return max((wa[k] - wb[k]).abs().max().item() for k in wa)

    # Adam's first step moves a weight by about lr whatever its gradient's size, so the few near-zero gradients
    # (float noise of the summation order) move apart by a small part of a step: measured 9e-6 of 1.1e-3
    assert gap(torch_one.out, out) < gap(torch_one.out, torch_two.out) / 10
    written = kept.stat().st_mtime_ns
    launched(stage(store, trained_checkpoint, out, 1, "float32", ZERO3, epochs=2, **each_row_alone), tmp_path / "two.json",
             nproc=2)
    assert kept.stat().st_mtime_ns == written  # read back on both processes, not computed again
    resumed, reference = steps_of(out), steps_of(torch_two.out)
    assert [m["step"] for m in resumed] == [1, 2]
    # the weights step 1 left differ a little (above), so the second step agrees a little less closely
    assert same_step(resumed[1], reference[1], rel=1e-4)
    assert resumed[1]["is_weight_mean"] == pytest.approx(first["is_weight_mean"], rel=1e-12)  # the start's, kept


def steps_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def same_step(a: dict, b: dict, rel: float) -> bool:
    """Whether two steps' loss, importance weights, clipping and gradient norm agree within ``rel``."""
    keys = ("loss", "is_weight_mean", "is_truncated_frac", "clip_frac_low", "clip_frac_high", "ratio_mean", "approx_kl",
            "grad_norm")
    return {k: a[k] for k in keys} == pytest.approx({k: b[k] for k in keys}, rel=rel)
