"""Stored trajectories -> the trainer's ``TrainBatch``es, for RFT (``sft``) and DAPO.

Every row is one trajectory's exact ids (prompt + response, no re-rendering) with its
action mask and the sampler's log-probs aligned to the full sequence (0 on the prompt
and on environment tokens), plus one advantage per row (1.0 for RFT, where it is unused).

* RFT rows come from ``swerl.rl.rft.select_rft`` (resolved runs; format-error replies
  masked out of the loss when asked).
* DAPO rows: ``score_trajectories`` -> optional reward overrides (an external grader's
  JSONL) -> ``batch_advantages`` -> the kept indices (zero-advantage samples dropped).
  Nothing is masked for format errors: a negative advantage is how the policy learns
  not to make them.

Rows are shuffled deterministically per (seed, epoch) and cut into optimiser steps of
``batch_size`` sequences (the last one may be smaller).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from swerl.agent.trajectory import Trajectory
from swerl.rl.advantages import BatchAdvantages, Mode, batch_advantages
from swerl.rl.rewards import LIMIT_EXITS, RewardConfig, ScoredTrajectory, score_trajectories
from swerl.rl.rft import TrainExample, training_example
from swerl.train.base import TrainBatch


class DataError(ValueError):
    """The trajectories cannot be trained on as asked; the message says why."""


@dataclass(frozen=True)
class Row:
    """One training sequence: a full-sequence ``TrainExample`` and its advantage."""

    example: TrainExample
    advantage: float = 1.0
    prox_logprobs: list[float] | None = None  # off-policy data: the update's start policy's log-probs (layout of old_logprobs)

    @property
    def length(self) -> int:
        return len(self.example.input_ids)


# ---------------------------------------------------------------------------- reading


def store_dir(path: Path) -> Path:
    """The Parquet folder of ``path``: the folder itself, or a rollout run's ``trajectories/``."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path} is not a folder of trajectories")
    if not any(path.glob("part-*.parquet")) and (path / "trajectories").is_dir():
        return path / "trajectories"
    return path


def read_trajectories(paths: Sequence[Path]) -> list[Trajectory]:
    """The trajectories of each folder (a store, or a rollout run folder), folder by folder in order."""
    from swerl.rollout.store import TrajectoryStore

    out: list[Trajectory] = []
    for p in paths:
        d = store_dir(p)
        found = TrajectoryStore(d).trajectories()
        if not found:
            raise DataError(f"no trajectories in {p} (expected part-*.parquet files, or a rollout run folder with trajectories/)")
        out.extend(found)
    return out


def _examples(ids: Iterable[str], limit: int = 3) -> str:
    ids = list(ids)
    return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def check_trajectories(trajectories: Sequence[Trajectory], policy_version: str | None = None,
                       require_exact_ids: bool = False) -> None:
    """Refuse stale data (a policy version other than ``policy_version``, when given), ids
    re-tokenized from text (when ``require_exact_ids``), and token streams whose lengths disagree."""
    bad = [t.trajectory_id for t in trajectories
           if not (len(t.response_ids) == len(t.action_mask) == len(t.logprobs))]
    if bad:
        raise DataError(f"{len(bad)} trajectory(ies) have response_ids, action_mask and logprobs of different lengths: {_examples(bad)}")
    if policy_version is not None:
        stale = [t for t in trajectories if t.policy_version != policy_version]
        if stale:
            versions = sorted({t.policy_version for t in stale})
            raise DataError(f"{len(stale)} of {len(trajectories)} trajectories were sampled by policy version(s) "
                            f"{versions}, not {policy_version!r} (stale data): {_examples(t.trajectory_id for t in stale)}")
    if require_exact_ids:
        inexact = [t.trajectory_id for t in trajectories if not t.exact_ids]
        if inexact:
            raise DataError(f"{len(inexact)} of {len(trajectories)} trajectories have ids re-tokenized from text (exact_ids=False), "
                            f"so their log-probs do not belong to their ids and importance ratios would be wrong: "
                            f"{_examples(inexact)}; roll out with an engine that returns token ids (hf, vllm)")


# ---------------------------------------------------------------------------- RFT


def rft_rows(examples: Sequence[TrainExample]) -> list[Row]:
    """RFT rows: the selected examples, advantage 1.0 (the ``sft`` objective ignores it)."""
    return [Row(e, 1.0) for e in examples]


# ---------------------------------------------------------------------------- DAPO


def read_reward_overrides(path: Path) -> dict[str, float]:
    """A JSONL of ``{"trajectory_id": str, "reward": number}`` lines (blank lines allowed)."""
    out: dict[str, float] = {}
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{n}: not JSON: {e}") from e
            tid = record.get("trajectory_id") if isinstance(record, dict) else None
            value = record.get("reward") if isinstance(record, dict) else None
            if not isinstance(tid, str) or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise DataError(f"{path}:{n}: expected {{\"trajectory_id\": str, \"reward\": finite number}}, got {line.strip()[:200]}")
            if tid in out:
                raise DataError(f"{path}:{n}: trajectory_id {tid!r} appears twice")
            out[tid] = float(value)
    return out


def apply_reward_overrides(trajectories: Sequence[Trajectory], scored: Sequence[ScoredTrajectory],
                           overrides: Mapping[str, float], cfg: RewardConfig) -> tuple[list[ScoredTrajectory], list[str]]:
    """``scored`` with each overridden trajectory's reward replaced by the given one (the whole
    R: no length penalty is added). A trajectory left out only because it was never graded is
    used as a graded one (its limit exit, if any, under ``cfg.limit_policy``); one that ended in
    an infrastructure error keeps its ``error_policy`` use. Returns the new list and the override
    ids that name no trajectory here."""
    out = []
    for t, s in zip(trajectories, scored, strict=True):
        if t.trajectory_id not in overrides:
            out.append(s)
            continue
        use, reason = s.use, s.reason
        if reason == "ungraded":
            use, reason = (cfg.limit_policy, t.exit_reason.value) if t.exit_reason in LIMIT_EXITS else ("keep", None)
        out.append(replace(s, reward=None if use == "drop" else overrides[t.trajectory_id], use=use, reason=reason))
    known = {t.trajectory_id for t in trajectories}
    return out, sorted(set(overrides) - known)


@dataclass(frozen=True)
class DapoData:
    """What one DAPO iteration trains on, and how it got there."""

    rows: list[Row]
    scored: list[ScoredTrajectory]
    advantages: BatchAdvantages
    unmatched_overrides: list[str]
    no_action_tokens: int  # kept by the advantages but with no action token to train on
    resolved_rate: float  # resolved share of the graded trajectories

    @property
    def reward_mean(self) -> float:
        rewards = [s.reward for s in self.scored if s.reward is not None]
        return sum(rewards) / len(rewards) if rewards else 0.0

    @property
    def kept_fraction(self) -> float:
        return self.advantages.kept_fraction

    def summary(self) -> dict[str, float]:
        """Batch-level metrics, recorded with every optimiser step."""
        return {"reward_mean": self.reward_mean, "kept_fraction": self.kept_fraction, "rows": float(len(self.rows)),
                "trajectories": float(len(self.scored)), "resolved_rate": self.resolved_rate}


def dapo_data(trajectories: Sequence[Trajectory], reward_cfg: RewardConfig, mode: Mode = "mean_std",
              overrides: Mapping[str, float] | None = None, drop_zero_advantage: bool = True) -> DapoData:
    """Rewards -> group advantages -> the rows with a nonzero advantage, in input order.

    ``drop_zero_advantage=False`` keeps zero-advantage samples (plain GRPO): they add no
    gradient but count in the loss's normaliser, which shrinks every other sample's step.
    """
    scored = score_trajectories(trajectories, reward_cfg)
    unmatched: list[str] = []
    if overrides:
        scored, unmatched = apply_reward_overrides(trajectories, scored, overrides, reward_cfg)
        if len(unmatched) == len(overrides):
            raise DataError(f"none of the {len(overrides)} reward overrides names one of these {len(trajectories)} "
                            f"trajectories (e.g. {_examples(unmatched)}); ids look like '<instance_id>/<sample_index>'")
    adv = batch_advantages(scored, mode=mode, min_abs=1e-6 if drop_zero_advantage else 0.0)
    rows, empty = [], 0
    for i in adv.kept:
        example = training_example(trajectories[i], mask_format_errors=False)
        if len(example.input_ids) < 2 or not any(example.action_mask):
            empty += 1
            continue
        rows.append(Row(example, adv.advantages[i]))
    graded = [t for t in trajectories if t.resolved is not None]
    resolved = sum(bool(t.resolved) for t in graded) / len(graded) if graded else 0.0
    return DapoData(rows, list(scored), adv, unmatched, empty, resolved)


# ---------------------------------------------------------------------------- batches


def shuffled(rows: Sequence[Row], seed: int, epoch: int) -> list[Row]:
    """``rows`` in the order of (seed, epoch): the same on every run and every machine."""
    order = list(rows)
    random.Random(f"swerl-train:{seed}:{epoch}").shuffle(order)
    return order


def split(rows: Sequence[Row], batch_size: int) -> list[list[Row]]:
    """Consecutive groups of ``batch_size`` rows; the last may be smaller."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [list(rows[i:i + batch_size]) for i in range(0, len(rows), batch_size)]


def to_batch(rows: Sequence[Row], pad_token_id: int = 0) -> TrainBatch:
    """One ``TrainBatch``: the rows' ids, masks, old log-probs and advantages; ``meta`` names them."""
    # off-policy rows carry the update's start policy's log-probs; the others were sampled by it, so theirs are its
    prox = [r.prox_logprobs if r.prox_logprobs is not None else r.example.old_logprobs for r in rows] \
        if any(r.prox_logprobs is not None for r in rows) else None
    batch = TrainBatch([r.example.input_ids for r in rows], [r.example.action_mask for r in rows],
                       [r.example.old_logprobs for r in rows], [r.advantage for r in rows], pad_token_id=pad_token_id,
                       prox_logprobs=prox)
    batch.meta["trajectory_ids"] = [r.example.trajectory_id for r in rows]
    return batch


def epoch_batches(rows: Sequence[Row], batch_size: int, seed: int, epoch: int, pad_token_id: int = 0) -> list[TrainBatch]:
    """The optimiser steps of one epoch: shuffled by (seed, epoch), cut into ``batch_size`` rows."""
    return [to_batch(chunk, pad_token_id) for chunk in split(shuffled(rows, seed, epoch), batch_size)]


def steps_per_epoch(n_rows: int, batch_size: int) -> int:
    return -(-n_rows // batch_size)


def fingerprint(rows: Sequence[Row], **settings) -> str:
    """A digest of the rows (ids, masks, log-probs, advantages) and the settings that order them:
    a resumed run checks it trains on the same data the same way."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for r in rows:
        e = r.example
        h.update(json.dumps([e.trajectory_id, e.input_ids, e.action_mask, [round(x, 6) for x in e.old_logprobs],
                             round(r.advantage, 9)]).encode())
    return h.hexdigest()[:16]


def check_lengths(rows: Sequence[Row], max_tokens_per_microbatch: int) -> None:
    """Every sequence must fit one micro-batch."""
    longest = max((r.length for r in rows), default=0)
    if longest > max_tokens_per_microbatch:
        too_long = [r.example.trajectory_id for r in rows if r.length > max_tokens_per_microbatch]
        raise DataError(f"{len(too_long)} sequence(s) are longer than --max-tokens-per-microbatch {max_tokens_per_microbatch} "
                        f"(longest {longest} tokens: {_examples(too_long)}); raise it to at least {longest}")
