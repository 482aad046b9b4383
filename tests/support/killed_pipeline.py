"""A pipeline run in a process of its own, killed with SIGKILL when a condition holds; what the kill-and-resume
tests share."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def external_rewards(tmp: Path, tasks: Path) -> Path:
    """An external grader's rewards: sample 0 of each task scores 1, sample 1 scores 0 (every group of 2 has an
    advantage, so each DAPO iteration takes a real step on the tiny model, which solves nothing)."""
    rewards = tmp / "external-rewards.jsonl"
    ids = [json.loads(line)["instance_id"] for line in tasks.read_text().splitlines()]
    rewards.write_text("".join(json.dumps({"trajectory_id": f"{i}/{s}", "reward": float(s == 0)}) + "\n"
                               for i in ids for s in (0, 1)))
    return rewards


def parts(store: Path) -> dict[str, bytes]:
    """A trajectory store's Parquet parts, by name."""
    return {p.name: p.read_bytes() for p in sorted(store.glob("part-*.parquet"))} if store.is_dir() else {}


def run_until(tmp: Path, params, prefect_api: str, condition: Callable[[], bool], timeout_s: float,
              poll_s: float = 0.5) -> Path:
    """Run ``params``' pipeline in its own process group until ``condition()`` holds (or it ends, or ``timeout_s``
    passes), then kill the group with SIGKILL; the process's log."""
    (tmp / "params.json").write_text(params.model_dump_json())
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(ROOT)}
    log = tmp / "killed.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "tests/flows/pipeline_proc.py"), str(tmp / "params.json")],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not condition() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(poll_s)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return log


def _merged(base: dict, changes: dict) -> dict:
    out = dict(base)
    for key, value in changes.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def tiny_dapo_pipeline(name: str, tmp: Path, tasks: Path, repos: Path, experiment: str, **changes):
    """A pipeline of the tiny model on ``tasks``: RFT on scripted demonstrations, then 2 DAPO iterations with
    ``external_rewards``, MLflow on SQLite in ``tmp``; ``changes`` merged into its settings (nested dicts too)."""
    from swerl.orchestration.params import PipelineParams

    base = {
        "name": name, "run_root": str(tmp / "runs"), "tasks": str(tasks), "repos": str(repos), "seed": 3,
        "sampler": {"engine": "hf", "concurrency": 3, "agent": {"max_turns": 3, "max_new_tokens": 24}},
        "rft": {"sampler": {"engine": "scripted", "concurrency": 3, "agent": {"max_turns": 20}}, "attempts": 1,
                "train": {"epochs": 1, "batch_size": 3, "optimizer": {"lr": 1e-3, "warmup_steps": 0}}},
        "dapo": {"iterations": 2, "group_size": 2, "rewards_file": str(external_rewards(tmp, tasks)),
                 "reward": {"length_penalty": False}, "train": {"optimizer": {"lr": 1e-4, "lr_schedule": "constant"}}},
        "tracking": {"tracking_uri": f"sqlite:///{tmp / 'mlflow.db'}", "experiment": experiment},
    }
    return PipelineParams.model_validate(_merged(base, changes))


def async_pipeline(name: str, tmp: Path, tasks: Path, repos: Path, experiment: str):
    """``tiny_dapo_pipeline`` asynchronous (iteration 2 samples while iteration 1 trains), with many small steps so
    that iteration 1's update lasts long enough for a kill or a cancellation to land inside the overlap."""
    return tiny_dapo_pipeline(name, tmp, tasks, repos, experiment, validate_runs=0, sampler={"concurrency": 2},
                              dapo={"off_policy": {"max_staleness": 1}, "train": {"epochs": 40, "batch_size": 2}},
                              eval={"runs": 1, "evaluate_start": False, "every_iteration": False})


def train_steps(train_dir: Path) -> list[int]:
    """The steps an update has written to its metrics."""
    metrics = train_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in metrics.read_text().splitlines()] if metrics.is_file() else []


def in_overlap(run_dir: Path) -> bool:
    """Iteration 2 has stored trajectories while iteration 1's update has written a step and is not finished."""
    from swerl.orchestration.ledger import Ledger

    return bool(parts(run_dir / "iter-2" / "rollout" / "trajectories")) and bool(train_steps(run_dir / "iter-1" / "train")) \
        and "iter-1" not in Ledger(run_dir).finished()
