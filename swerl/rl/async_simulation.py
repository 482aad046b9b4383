"""What overlapping sampling with training would gain: a discrete-event simulation of DAPO iterations, synchronous
(``max_staleness = 0``) or asynchronous with a bounded staleness, driven by the stage times of a measured run.

Why a simulation: on 2 shared cores the trainer, the policy and the sandboxes compete for the same CPUs, so running
the async mode here cannot show what a GPU trainer beside sandboxes on their own hosts gains. The simulation takes
the measured durations, scales them by a cluster shape's speed-ups, and replays the pipeline's scheduling:

- Each iteration samples ``trajectories_per_iteration`` trajectories, first come first served on ``sampler_slots``
  (one sandbox each); each finished trajectory is graded, on ``grading_slots`` of its own or, as swerl's runner does
  today, in the trajectory's own slot before the slot is freed (``grading_slots = None``).
- Update k trains on iteration k's data once all of it is sampled and graded and update k-1 has finished; it starts
  from version k-1 and makes version k (version 0 samples iteration 1: the ``rft`` of ``swerl.rl.staleness``, so
  relative version v is ``dapo-v``, version index v + 1).
- A new version is reloaded into the policy server at once (``reload_s``, one at a time): no trajectory starts during
  a reload and the ones in flight are paused for it, then go on with the new weights (partial rollouts).
- Iteration k is released to the sampler when iteration k-1's data is complete (with ``overlap_tail``: when its
  last trajectory has started, so the next iteration fills the slots its long tail leaves free) and the server holds
  at least version k-1-b: never more than b versions ahead of the trainer. With b = 0 that is the synchronous
  pipeline: sample, grade, train, reload, and again.
- A trajectory's staleness is the version update k starts from (k-1) minus the version the server held when it
  started (the oldest of its turns); one more than b behind is dropped. The release rule already holds every
  trajectory within b, so ``dropped`` stays 0: it is counted as the invariant's check, the way
  ``swerl.rl.staleness.within_bound`` counts it in a real run.

The durations are drawn up front from a seeded RNG, one shuffle of the measured list per pass (every iteration of as
many trajectories as were measured replays the measured set, its long tail included), so the runs of one seed under
different bounds sample the very same work and differ only in their scheduling.

A larger bound is never slower when iterations wait for each other's data and nothing reloads (every start time is
a max over terms the bound only lowers; tested). With reloads it can be, a little: a bound that starts an iteration
before a reload has the reload pause it, where a smaller one would have started after it. Filling the tail can
reorder the slots' work and, like any list schedule, occasionally finish later.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

MAX_SIMULATED = 5_000_000  # trajectories in one simulation: a few seconds of heap work per million
Seconds = Annotated[float, Field(ge=0.0, le=1e7)]

# the order of events at one instant: what ends frees its slot before anything starts, and a reload that starts at
# the instant a trajectory ends does not pause that trajectory
_SAMPLE_END, _GRADE_END, _TRAIN_END, _RELOAD_END = range(4)


class StageTimes(BaseModel):
    """The measured figures of one synchronous iteration."""

    model_config = ConfigDict(extra="forbid")

    sampling_s: list[Seconds] = Field(description="Each trajectory's time in its sampler slot, sandbox start and "
                                      "removal included, grading not (the long tail matters: keep every one).")
    grading_s: list[Seconds] = Field(description="Each trajectory's grading time in a fresh sandbox (0 for one whose "
                                     "verdict was reused). Paired with sampling_s by index when the lists are as long.")
    generation_s: list[Seconds] | None = Field(None, description="The policy's share of each sampling_s, the part "
                                               "sample_speedup shortens; None: sample_speedup shortens the whole.")
    train_s: Seconds = Field(description="Seconds of one update on the measured iteration's data, its loading and "
                             "checkpoint included.")
    reload_s: Seconds = Field(0.0, description="Seconds one new version takes to load into the policy server.")
    measured_trajectories: int | None = Field(None, ge=1, le=10_000_000, description="Trajectories the measured update "
                                              "trained on; training grows with the data (default: len(sampling_s)).")

    @field_validator("sampling_s", "grading_s")
    @classmethod
    def _not_empty(cls, values: list[float], info: ValidationInfo) -> list[float]:
        if not values:
            raise ValueError(f"{info.field_name} is empty: the simulation draws every trajectory from the measured "
                             "durations, so at least one is needed")
        return values

    @model_validator(mode="after")
    def _generation_within_sampling(self) -> StageTimes:
        if self.generation_s is None:
            return self
        if len(self.generation_s) != len(self.sampling_s):
            raise ValueError(f"generation_s has {len(self.generation_s)} durations and sampling_s "
                             f"{len(self.sampling_s)}: each is a share of the same trajectory's time")
        worst = next((i for i, (g, s) in enumerate(zip(self.generation_s, self.sampling_s)) if g > s), None)
        if worst is not None:
            raise ValueError(f"trajectory {worst}: generation_s ({self.generation_s[worst]}) exceeds its sampling_s "
                             f"({self.sampling_s[worst]}); the policy's share cannot be longer than the whole")
        return self


class ClusterShape(BaseModel):
    """Where the stages run and how much faster than where they were measured."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("", description="A label for printing.")
    sampler_slots: int = Field(ge=1, le=100_000, description="Trajectories at once: sandboxes per host x hosts.")
    grading_slots: int | None = Field(None, ge=1, le=100_000, description="Gradings at once on their own sandboxes; "
                                      "None: graded in the trajectory's sampler slot before it is freed (swerl today).")
    sample_speedup: float = Field(1.0, gt=0.0, le=1e4, description="Policy serving against the measurement (e.g. "
                                  "vLLM on GPUs against the CPU engine): divides the generation share of sampling.")
    train_speedup: float = Field(1.0, gt=0.0, le=1e5, description="The trainer against the measurement (e.g. 8 GPUs "
                                 "against 2 cores): divides the training time.")
    iterations: int = Field(ge=1, le=10_000, description="DAPO iterations to simulate.")
    trajectories_per_iteration: int = Field(ge=1, le=1_000_000, description="Tasks x G samples each.")

    @model_validator(mode="after")
    def _bounded_work(self) -> ClusterShape:
        if self.iterations * self.trajectories_per_iteration > MAX_SIMULATED:
            raise ValueError(f"{self.iterations} iterations x {self.trajectories_per_iteration} trajectories is over "
                             f"{MAX_SIMULATED:,} trajectories: simulate fewer iterations, the per-iteration figures "
                             "settle within a few")
        return self


class SimResult(BaseModel):
    """What one simulated run took, and where the time went. Slot-seconds count each slot's seconds."""

    max_staleness: int = Field(ge=0, description="The bound simulated (0: synchronous).")
    iterations: int = Field(ge=1, description="Iterations simulated.")
    total_wall_s: float = Field(ge=0.0, description="From the first trajectory's start to the last update's end.")
    wall_per_iteration_s: float = Field(ge=0.0, description="total_wall_s / iterations.")
    iteration_wall_s: list[float] = Field(description="Between consecutive updates' ends (the first from the start).")
    sampling_busy_s: float = Field(ge=0.0, description="Slot-seconds sampling (reload pauses in flight included).")
    grading_busy_s: float = Field(ge=0.0, description="Slot-seconds grading.")
    training_busy_s: float = Field(ge=0.0, description="Seconds the trainer trained.")
    trainer_idle_s: float = Field(ge=0.0, description="Seconds the trainer waited for data.")
    sampler_idle_s: float = Field(ge=0.0, description="Sampler slot-seconds neither sampling nor grading.")
    grading_idle_s: float = Field(ge=0.0, description="Grading slot-seconds idle (0 when graded in sampler slots).")
    reload_pause_s: float = Field(ge=0.0, description="Seconds the sampler was paused by reloads.")
    trainer_idle_share: float = Field(ge=0.0, le=1.0, description="trainer_idle_s / total_wall_s.")
    sampler_idle_share: float = Field(ge=0.0, le=1.0, description="sampler_idle_s / (sampler slots x total_wall_s).")
    trajectories: int = Field(ge=0, description="Trajectories sampled.")
    dropped: int = Field(ge=0, description="Trajectories more than max_staleness versions behind their update.")
    mean_staleness: float = Field(ge=0.0, description="Mean versions behind, over the kept trajectories.")

    @property
    def dropped_share(self) -> float:
        return self.dropped / self.trajectories if self.trajectories else 0.0


@dataclass
class _Trajectory:
    iteration: int  # 1-based
    sample_s: float
    grade_s: float
    started: float = 0.0
    version: int = 0
    pause_seen: float = 0.0  # the reload pause total when its end was last scheduled


def _shuffled_indices(rng: random.Random, pool: int, count: int) -> list[int]:
    """``count`` indices into ``pool`` measured durations, one shuffle per pass: as many as measured replays the
    measured set exactly, so its longest trajectories are in every iteration rather than missed by chance."""
    out: list[int] = []
    while len(out) < count:
        order = list(range(pool))
        rng.shuffle(order)
        out.extend(order)
    return out[:count]


def _sample_duration(times: StageTimes, i: int, speedup: float) -> float:
    """Trajectory ``i``'s slot time on the shape: only the policy's share runs faster (the sandbox's does not)."""
    whole = times.sampling_s[i]
    policy = whole if times.generation_s is None else times.generation_s[i]
    return whole - policy + policy / speedup


def _draw_plan(times: StageTimes, shape: ClusterShape, seed: int) -> list[list[_Trajectory]]:
    """Every iteration's trajectories, durations drawn before the run so that every bound schedules the same work."""
    rng = random.Random(seed)
    paired = len(times.grading_s) == len(times.sampling_s)  # the same trajectory's sampling and grading
    plan = []
    for k in range(1, shape.iterations + 1):
        picks = _shuffled_indices(rng, len(times.sampling_s), shape.trajectories_per_iteration)
        grades = picks if paired else _shuffled_indices(rng, len(times.grading_s), shape.trajectories_per_iteration)
        plan.append([_Trajectory(k, _sample_duration(times, i, shape.sample_speedup), times.grading_s[j])
                     for i, j in zip(picks, grades)])
    return plan


def update_seconds(times: StageTimes, shape: ClusterShape) -> float:
    """One update's seconds on the shape: the measured update, scaled to the iteration's data and the trainer."""
    measured = times.measured_trajectories or len(times.sampling_s)
    return times.train_s * shape.trajectories_per_iteration / measured / shape.train_speedup


@dataclass
class _Run:
    """The simulation's state; ``simulate`` builds one and steps it to the end."""

    shape: ClusterShape
    bound: int
    overlap_tail: bool
    train_s: float
    reload_s: float
    plan: list[list[_Trajectory]]
    now: float = 0.0
    events: list = field(default_factory=list)
    order: itertools.count = field(default_factory=itertools.count)
    queue: deque = field(default_factory=deque)  # released, not started: FIFO
    to_grade: deque = field(default_factory=deque)
    free_slots: int = 0
    free_graders: int = 0
    released: int = 0
    left: list[int] = field(default_factory=list)  # per iteration: trajectories not yet sampled and graded
    complete: list[bool] = field(default_factory=list)
    next_update: int = 1
    training: bool = False
    server_version: int = 0
    reloading: bool = False
    to_reload: deque = field(default_factory=deque)
    pause_total: float = 0.0
    sampling_busy: float = 0.0
    grading_busy: float = 0.0
    update_ends: list[float] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    dropped: int = 0

    def push(self, at: float, kind: int, what: object) -> None:
        heapq.heappush(self.events, (at, kind, next(self.order), what))


def _may_release(run: _Run, k: int) -> bool:
    """Whether iteration ``k`` may start sampling: the previous one's data is complete (or, overlapping the tail,
    all of it has started) and the server is at most ``bound`` versions behind update k's start (k-1)."""
    if k == 1:
        return True
    previous_done = not run.queue if run.overlap_tail else run.complete[k - 2]
    return previous_done and run.server_version >= k - 1 - run.bound


def _release(run: _Run) -> None:
    while run.released < run.shape.iterations and _may_release(run, run.released + 1):
        run.queue.extend(run.plan[run.released])
        run.released += 1


def _start_trajectories(run: _Run) -> None:
    """Fill free slots first come first served from what the bound releases; none starts during a reload. Release
    is looked at before each start: overlapping the tail, an iteration's last start releases the next one."""
    while True:
        _release(run)
        if not (run.free_slots and run.queue and not run.reloading):
            return
        t = run.queue.popleft()
        t.started, t.version, t.pause_seen = run.now, run.server_version, run.pause_total
        run.free_slots -= 1
        run.push(run.now + t.sample_s, _SAMPLE_END, t)


def _start_gradings(run: _Run) -> None:
    while run.free_graders and run.to_grade:
        t = run.to_grade.popleft()
        run.free_graders -= 1
        run.push(run.now + t.grade_s, _GRADE_END, t)


def _start_update(run: _Run) -> None:
    """Update k starts once its data is complete and the trainer is free; its data's staleness is counted then."""
    k = run.next_update
    if run.training or k > run.shape.iterations or not run.complete[k - 1]:
        return
    for t in run.plan[k - 1]:
        behind = (k - 1) - t.version
        if behind > run.bound:
            run.dropped += 1
        else:
            run.staleness.append(behind)
    run.training = True
    run.push(run.now + run.train_s, _TRAIN_END, k)


def _start_reload(run: _Run) -> None:
    """One reload at a time; it pauses the trajectories in flight, whose ends move on when they come up."""
    if run.reloading or not run.to_reload:
        return
    run.reloading = True
    run.pause_total += run.reload_s
    run.push(run.now + run.reload_s, _RELOAD_END, run.to_reload.popleft())


def _advance(run: _Run) -> None:
    _start_update(run)
    _start_reload(run)
    _start_trajectories(run)
    _start_gradings(run)


def _sampled(run: _Run, t: _Trajectory) -> None:
    """A trajectory's end came up: move it on by the reloads since it was scheduled, else grade it."""
    paused = run.pause_total - t.pause_seen
    if paused > 0:
        t.pause_seen = run.pause_total
        run.push(run.now + paused, _SAMPLE_END, t)
        return
    run.sampling_busy += run.now - t.started
    if run.shape.grading_slots is None:  # graded in its own slot, which stays taken
        run.push(run.now + t.grade_s, _GRADE_END, t)
    else:
        run.free_slots += 1
        run.to_grade.append(t)


def _graded(run: _Run, t: _Trajectory) -> None:
    run.grading_busy += t.grade_s
    if run.shape.grading_slots is None:
        run.free_slots += 1
    else:
        run.free_graders += 1
    run.left[t.iteration - 1] -= 1
    run.complete[t.iteration - 1] = run.left[t.iteration - 1] == 0


def _trained(run: _Run, k: int) -> None:
    run.training = False
    run.update_ends.append(run.now)
    run.next_update = k + 1
    if k < run.shape.iterations:  # the last version samples nothing here
        run.to_reload.append(k)


def _reloaded(run: _Run, version: int) -> None:
    run.server_version = version
    run.reloading = False


_HANDLERS = {_SAMPLE_END: _sampled, _GRADE_END: _graded, _TRAIN_END: _trained, _RELOAD_END: _reloaded}


def _result(run: _Run) -> SimResult:
    """The run's figures; idle is what the slots and the trainer had and did not use before the last update's end."""
    shape, wall = run.shape, run.update_ends[-1]
    in_slot_grading = run.grading_busy if shape.grading_slots is None else 0.0
    sampler_idle = max(0.0, shape.sampler_slots * wall - run.sampling_busy - in_slot_grading)
    grading_idle = 0.0 if shape.grading_slots is None else max(0.0, shape.grading_slots * wall - run.grading_busy)
    training = run.train_s * shape.iterations
    starts = [0.0, *run.update_ends[:-1]]
    return SimResult(
        max_staleness=run.bound, iterations=shape.iterations, total_wall_s=wall,
        wall_per_iteration_s=wall / shape.iterations,
        iteration_wall_s=[end - start for start, end in zip(starts, run.update_ends)],
        sampling_busy_s=run.sampling_busy, grading_busy_s=run.grading_busy, training_busy_s=training,
        trainer_idle_s=max(0.0, wall - training), sampler_idle_s=sampler_idle, grading_idle_s=grading_idle,
        reload_pause_s=run.pause_total,
        trainer_idle_share=min(1.0, max(0.0, wall - training) / wall) if wall else 0.0,
        sampler_idle_share=min(1.0, sampler_idle / (shape.sampler_slots * wall)) if wall else 0.0,
        trajectories=sum(len(p) for p in run.plan), dropped=run.dropped,
        mean_staleness=sum(run.staleness) / len(run.staleness) if run.staleness else 0.0,
    )


def simulate(times: StageTimes, shape: ClusterShape, max_staleness: int, seed: int = 0, *,
             overlap_tail: bool = False) -> SimResult:
    """Simulate ``shape.iterations`` DAPO iterations under ``max_staleness`` (0: synchronous); see the module
    docstring for the rules. Pure: the same inputs give the same result."""
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be 0 or more (0 is the synchronous pipeline), got {max_staleness}")
    plan = _draw_plan(times, shape, seed)
    run = _Run(shape=shape, bound=max_staleness, overlap_tail=overlap_tail, train_s=update_seconds(times, shape),
               reload_s=times.reload_s, plan=plan, free_slots=shape.sampler_slots,
               free_graders=shape.grading_slots or 0, left=[len(p) for p in plan], complete=[False] * len(plan))
    _advance(run)
    while run.events:
        run.now, kind, _, what = heapq.heappop(run.events)
        _HANDLERS[kind](run, what)
        _advance(run)
    return _result(run)


def sweep(times: StageTimes, shape: ClusterShape, bounds: Sequence[int], seed: int = 0, *,
          overlap_tail: bool = False) -> list[SimResult]:
    """One result per staleness bound, all on the same drawn work (same seed)."""
    return [simulate(times, shape, b, seed, overlap_tail=overlap_tail) for b in bounds]


def overlap_bound(sample_phase_s: float, train_s: float, reload_s: float = 0.0) -> float:
    """The most overlapping can gain per iteration in a steady state when each iteration waits for the previous one's
    data: (S + T + R) / max(S, T). Synchronously the sampling phase, the update and the reload follow one another;
    overlapped, the trainer still needs T an iteration and the sampler S, and a reload can hide where sampling has
    slack (a grading-bound phase). Balanced (S = T, no reload): 2x. Filling the tail shortens S itself, so it can
    pass this bound."""
    if min(sample_phase_s, train_s, reload_s) < 0 or sample_phase_s + train_s == 0:
        raise ValueError(f"sampling phase ({sample_phase_s} s), update ({train_s} s) and reload ({reload_s} s) must be "
                         "0 or more, the first two not both 0")
    return (sample_phase_s + train_s + reload_s) / max(sample_phase_s, train_s)
