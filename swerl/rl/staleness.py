"""How far behind the policy being trained the data is: a version's place in the pipeline, a trajectory's
staleness, and the bound an off-policy update holds to.

Staleness counts DAPO updates. The pipeline's policies follow one another: the starting policy (``0``, or
``warm-start``), then ``rft``, then ``dapo-1``, ``dapo-2``, ... The policies before DAPO are one place in that
order, DAPO's start (0): whichever of them is last is the one DAPO's first iteration starts from, and no DAPO
rollout samples the others, so a pipeline without RFT counts ``0`` -> ``dapo-1`` as one update, as one with it
counts ``rft`` -> ``dapo-1``. A trajectory sampled by ``dapo-1`` and trained on by the update that starts
from ``dapo-2`` is one version behind: staleness 1. Synchronous DAPO trains only on staleness 0; an
asynchronous run samples iteration k+1 while iteration k trains, and trains on data at most
``max_staleness`` versions behind, with the truncated importance weight of ``swerl.rl.loss`` correcting
for it. A reload may land in the middle of a trajectory (partial rollouts): each turn records its own
version, and a trajectory is as stale as its oldest turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from swerl.agent.trajectory import Trajectory

_DAPO = re.compile(r"^dapo-([1-9][0-9]*)$")
_FIXED = {"0": 0, "warm-start": 0, "rft": 0}  # DAPO's start, whichever it is


class StalenessError(ValueError):
    """A policy version with no place in the pipeline's order, so no staleness can be said of it."""


def version_index(version: str) -> int:
    """The version's place in the pipeline's order, in DAPO updates: ``0``, ``warm-start`` and ``rft`` 0 (DAPO's
    start), ``dapo-k`` k."""
    if version in _FIXED:
        return _FIXED[version]
    match = _DAPO.match(version)
    if match is None:
        raise StalenessError(f"policy version {version!r} has no place in the pipeline's order (0, warm-start, rft, "
                             "dapo-k), so its staleness is unknown; an off-policy update trains only on the pipeline's "
                             "own versions")
    return int(match.group(1))


def staleness(trajectory: Trajectory, update_start: str) -> int:
    """Versions between the oldest policy that sampled ``trajectory`` (any of its turns) and ``update_start``."""
    versions = {t.policy_version for t in trajectory.turns if t.policy_version} | {trajectory.policy_version}
    behind = version_index(update_start) - min(version_index(v) for v in versions)
    if behind < 0:
        raise StalenessError(f"trajectory {trajectory.trajectory_id} was sampled by a newer policy ({sorted(versions)}) "
                             f"than the update's start {update_start!r}: the run's versions are out of order")
    return behind


@dataclass(frozen=True)
class StaleSplit:
    """The trajectories an update may train on, those it leaves out, and each one's staleness."""

    kept: list[Trajectory]
    dropped: list[Trajectory]
    staleness: dict[str, int]  # trajectory_id -> versions behind

    def mean(self) -> float:
        """Mean staleness of the kept trajectories (0.0 when none)."""
        return sum(self.staleness[t.trajectory_id] for t in self.kept) / len(self.kept) if self.kept else 0.0


def within_bound(trajectories: Sequence[Trajectory], update_start: str, max_staleness: int) -> StaleSplit:
    """Split ``trajectories`` by whether they are at most ``max_staleness`` versions behind ``update_start``; every
    trajectory is counted, none silently lost."""
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be 0 or more, got {max_staleness}")
    behind = {t.trajectory_id: staleness(t, update_start) for t in trajectories}
    kept = [t for t in trajectories if behind[t.trajectory_id] <= max_staleness]
    dropped = [t for t in trajectories if behind[t.trajectory_id] > max_staleness]
    return StaleSplit(kept, dropped, behind)
