"""`swerl train rft` and `swerl train dapo` end to end on the tiny policy (torch backend, CPU).

The store holds hand-made trajectories whose ids come from the tiny tokenizer and whose
log-probs are the tiny model's own (so DAPO's importance ratios start at 1). lr 1e-3 so
that a step visibly moves the weights. Checks: checkpoints, metrics lines, the saved
model loads, weights moved, a rerun is a no-op, a run that lost its last checkpoint
resumes and ends bit for bit where it did, raising --epochs continues, and the refusals.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from swerl.agent.trajectory import ExitReason, Trajectory, Turn
from swerl.cli import app
from swerl.rollout.store import TrajectoryStore

pytestmark = pytest.mark.slow

FAST = ["--backend", "torch", "--device", "cpu", "--lr", "1e-3", "--batch-size", "2", "--max-tokens-per-microbatch", "512"]


def make_traj(tok, model, iid: str, k: int, resolved: bool | None, *, turns: int = 2, reason=ExitReason.submitted,
              version: str = "v1", exact: bool = True) -> Trajectory:
    from swerl.rl.logprobs import sequence_action_logprobs

    prompt = tok.encode(f"Fix the bug in {iid}. Run the tests.")
    response, mask, records = [], [], []
    for i in range(2):
        reply = tok.encode(f"ls src/{iid} && cat setup.py # sample {k} turn {i}")
        obs = tok.encode(f"\nexit code {i}\n$ ")
        response += reply + obs
        mask += [1] * len(reply) + [0] * len(obs)
        records.append(Turn(index=i, reply="r", command="ls", n_action_tokens=len(reply), n_observation_tokens=len(obs)))
    ids = torch.tensor([prompt + response])
    full_mask = torch.tensor([[0] * len(prompt) + mask], dtype=torch.bool)
    with torch.no_grad():
        lp, _ = sequence_action_logprobs(model, ids, full_mask)
    logprobs = [float(x) if m else 0.0 for x, m in zip(lp[0, len(prompt):].tolist(), mask)]
    return Trajectory(instance_id=iid, sample_index=k, trajectory_id=f"{iid}/{k}", policy_version=version,
                      prompt_ids=prompt, response_ids=response, action_mask=mask, logprobs=logprobs, turns=records,
                      exit_reason=reason, resolved=resolved, exact_ids=exact, num_turns=turns)


@pytest.fixture(scope="module")
def stores(tiny_model_dir, tok, tmp_path_factory):
    """run/trajectories: a mixed (a/0 resolved, a/1 not); b both resolved; c both resolved,
    c/1 in 25 turns at the turn limit (R 0.5). Plus a store of stale and re-tokenized runs."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    root = tmp_path_factory.mktemp("stores")
    store = TrajectoryStore(root / "run" / "trajectories")
    for t in [make_traj(tok, model, "a", 0, True), make_traj(tok, model, "a", 1, False),
              make_traj(tok, model, "b", 0, True), make_traj(tok, model, "b", 1, True),
              make_traj(tok, model, "c", 0, True), make_traj(tok, model, "c", 1, True, turns=25, reason=ExitReason.max_turns)]:
        store.append(t)
    bad = TrajectoryStore(root / "bad")
    bad.append(make_traj(tok, model, "a", 0, True, version="v0"))
    bad.append(make_traj(tok, model, "a", 1, False, exact=False))
    unresolved = TrajectoryStore(root / "unresolved")
    unresolved.append(make_traj(tok, model, "a", 0, False))
    unresolved.append(make_traj(tok, model, "a", 1, False))
    return {"run": root / "run", "bad": root / "bad", "unresolved": root / "unresolved"}


def swerl(*args) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def assert_trained(out: Path, step: int, initial: dict[str, torch.Tensor]) -> None:
    from transformers import AutoModelForCausalLM

    folder = out / f"step-{step:06d}"
    AutoModelForCausalLM.from_pretrained(folder)  # loads as any HF checkpoint
    after = weights(folder)
    assert after.keys() == initial.keys()
    assert any(not torch.equal(after[k], initial[k]) for k in initial), "no parameter moved"


def test_rft_trains_checkpoints_and_resumes(stores, tiny_model_dir, tmp_path):
    out = tmp_path / "rft"
    args = ["train", "rft", "--trajectories", stores["run"], "--model", tiny_model_dir, "--out", out, *FAST,
            "--lr-schedule", "constant", "--warmup-steps", "0"]
    code, text = swerl(*args)
    assert code == 0, text
    assert "kept 5 of 6 trajectories; skipped 1 unresolved" in text
    assert sorted(p.name for p in out.glob("step-*")) == ["step-000001", "step-000002", "step-000003"]
    assert (out / "final").resolve() == (out / "step-000003").resolve()
    lines = metrics(out)
    assert [m["step"] for m in lines] == [1, 2, 3] and [m["sequences"] for m in lines] == [2, 2, 1]
    assert all(m["loss"] > 0 and m["lr"] == 1e-3 for m in lines)
    assert_trained(out, 3, weights(tiny_model_dir))
    state = json.loads((out / "step-000002" / "trainer_state" / "state.json").read_text())
    assert state["data_position"] == {"epoch": 0, "next_batch": 2} and state["config"]["objective"] == "sft"
    done = weights(out / "step-000003")

    code, text = swerl(*args)  # the same command again: nothing left to do
    assert code == 0 and "nothing to do" in text, text
    assert len(metrics(out)) == 3 and not (out / "step-000004").exists()

    # checkpoints 2 and 3 lost (a crash; their metrics lines remain): resume from step 1, redo 2 and 3 exactly
    shutil.rmtree(out / "step-000003")
    shutil.rmtree(out / "step-000002")
    (out / "final").unlink()
    code, text = swerl(*args)
    assert code == 0 and "resuming" in text and "2 new step(s), 3 in all" in text, text
    assert [m["step"] for m in metrics(out)] == [1, 2, 3]
    again = weights(out / "step-000003")
    assert all(torch.equal(again[k], done[k]) for k in done), "the resumed run diverged"

    code, text = swerl(*args, "--epochs", "2")  # continues a finished run into a second epoch
    assert code == 0, text
    assert [m["step"] for m in metrics(out)] == [1, 2, 3, 4, 5, 6] and metrics(out)[-1]["epoch"] == 1
    assert (out / "final").resolve() == (out / "step-000006").resolve()

    code, text = swerl(*args, "--epochs", "2", "--batch-size", "3")
    assert code == 2 and "other data or settings" in text and "batch_size" in text, text


def test_rft_refuses_an_empty_selection_and_stale_data(stores, tiny_model_dir, tmp_path):
    code, text = swerl("train", "rft", "--trajectories", stores["unresolved"], "--model", tiny_model_dir, "--out", tmp_path / "x", *FAST)
    assert code == 2 and "no resolved trajectory kept among 2: 2 unresolved" in text, text
    code, text = swerl("train", "rft", "--trajectories", stores["bad"], "--model", tiny_model_dir, "--out", tmp_path / "x",
                       "--policy-version", "v1", *FAST)
    assert code == 2 and "stale data" in text and "a/0" in text, text
    assert not (tmp_path / "x").exists()


def test_dapo_trains_on_nonzero_advantages(stores, tiny_model_dir, tmp_path):
    out = tmp_path / "dapo"
    code, text = swerl("train", "dapo", "--trajectories", stores["run"], "--model", tiny_model_dir, "--out", out, *FAST,
                       "--policy-version", "v1", "--iteration", "3")
    assert code == 0, text
    assert "kept 4/6 (66.7%): 2 zero-advantage" in text  # group b is all resolved in 2 turns
    lines = metrics(out)
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert m["kept_fraction"] == pytest.approx(4 / 6) and m["reward_mean"] == pytest.approx(4.5 / 6)
        assert m["iteration"] == 3 and "clip_frac_low" in m and "clip_frac_high" in m
    assert lines[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-3)  # old log-probs are the initial model's
    assert lines[0]["clip_frac_low"] == lines[0]["clip_frac_high"] == 0.0
    assert_trained(out, 2, weights(tiny_model_dir))
    state = json.loads((out / "step-000002" / "trainer_state" / "state.json").read_text())
    assert state["iteration"] == 3 and state["data_position"] == {"epoch": 1, "next_batch": 0}
    assert state["config"]["objective"] == "dapo" and state["config"]["loss"]["eps_high"] == 0.3


def test_the_plain_grpo_baseline_keeps_every_sample_and_averages_per_sequence(stores, tiny_model_dir, tmp_path):
    out = tmp_path / "grpo"
    code, text = swerl("train", "dapo", "--trajectories", stores["run"], "--model", tiny_model_dir, "--out", out, *FAST,
                       "--policy-version", "v1", "--keep-zero-advantage", "--loss-aggregation", "sequence", "--eps-high", "0.2")
    assert code == 0, text
    assert "kept 6/6 (100.0%): 0 zero-advantage" in text
    assert all(m["kept_fraction"] == 1.0 for m in metrics(out))
    state = json.loads((out / "step-000001" / "trainer_state" / "state.json").read_text())
    loss = state["config"]["loss"]
    assert (loss["loss_aggregation"], loss["eps_low"], loss["eps_high"]) == ("sequence", 0.2, 0.2)
    run = json.loads((out / "run.json").read_text())
    assert (run["drop_zero_advantage"], run["loss_aggregation"]) == (False, "sequence")


def test_dapo_reward_file_overrides_and_refusals(stores, tiny_model_dir, tmp_path):
    rewards = tmp_path / "rewards.jsonl"
    rewards.write_text('{"trajectory_id": "b/1", "reward": 0.0}\n')  # an external grader disagrees on b/1
    out = tmp_path / "dapo"
    code, text = swerl("train", "dapo", "--trajectories", stores["run"], "--model", tiny_model_dir, "--out", out, *FAST,
                       "--rewards", rewards)
    assert code == 0, text
    assert "1 reward(s) from" in text and "kept 6/6" in text
    assert len(metrics(out)) == 3  # 6 rows in steps of 2
    code, text = swerl("train", "dapo", "--trajectories", stores["bad"], "--model", tiny_model_dir, "--out", tmp_path / "y", *FAST)
    assert code == 2 and "re-tokenized" in text and "a/1" in text, text


def test_a_long_run_checkpoints_every_n_steps_and_a_crash_redoes_only_the_unsaved_ones(stores, tiny_model_dir, tmp_path):
    from swerl.stages.train import RFTStage, train_rft

    out = tmp_path / "sparse"
    stage = RFTStage(trajectories=[Path(stores["run"])], model=str(tiny_model_dir), out=out,
                     train={"epochs": 2, "batch_size": 2, "device": "cpu", "max_tokens_per_microbatch": 512, "save_every": 4,
                            "optimizer": {"lr": 1e-3, "lr_schedule": "constant", "warmup_steps": 0}})
    train_rft(stage)
    # 5 kept runs in batches of 2: 3 steps an epoch, 6 in all; saved at step 4 and at the last
    assert sorted(p.name for p in out.glob("step-*")) == ["step-000004", "step-000006"]
    assert [m["step"] for m in metrics(out)] == [1, 2, 3, 4, 5, 6]
    done = weights(out / "step-000006")

    shutil.rmtree(out / "step-000006")  # a crash after step 6's metrics line, before its checkpoint
    (out / "final").unlink()
    train_rft(stage)
    assert [m["step"] for m in metrics(out)] == [1, 2, 3, 4, 5, 6]  # 5 and 6 redone, not duplicated
    again = weights(out / "step-000006")
    assert all(torch.equal(again[k], done[k]) for k in done), "the resumed run diverged"
