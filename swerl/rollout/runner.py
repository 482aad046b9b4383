"""Run N tasks x G samples concurrently: sandbox, agent, grading, Parquet, with isolation.

Each (task, sample) is one coroutine holding one of ``concurrency`` slots for its whole
life (agent sandbox, then its grading sandbox), so at most that many sandboxes run. The
agent has a wall-clock deadline, so one straggler never wedges a batch; a sandbox that
does not start makes that pair an ``infra_error`` (infrastructure-failed: never scored),
any other failure its ``error`` exit, and the others carry on. A pair whose sandbox's host
was lost (``HostLost``: a pool's Docker host died under it) is run again at once, up to
``host_lost_retries`` times, in a fresh sandbox that the pool places on a host still alive,
so a dead host costs the stage time, not trajectories. Finished trajectories are
appended to the store at once; a rerun skips the pairs already stored (except errors and
infrastructure failures, which are redone); whether too many pairs failed for
infrastructure is the caller's call (``swerl.stages.rollout`` fails the stage as
retryable). A patch already graded for the same task in this run is not graded again: a
fresh sandbox of the same image runs the same tests on the same tree, so the verdict is
the same, and a converging policy submits the same fix many times; with ``grade_cache`` the
verdicts outlive the call, keyed by the whole task record, the image tag, the patch and the
grading settings, so the stages of a pipeline share them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from swerl.agent.chat_format import ChatFormat
from swerl.agent.loop import Agent
from swerl.agent.tools import install_tools
from swerl.agent.trajectory import ExitReason, Trajectory
from swerl.data.task import Task
from swerl.envs.factory import make_sandbox
from swerl.envs.sandbox import HostLost, SandboxError
from swerl.grading.grader import grade_prediction
from swerl.grading.results import GradeResult
from swerl.grading.verdict_store import JsonVerdictStore, content_key, grading_settings
from swerl.inference.base import InferenceEngine
from swerl.rollout.sampler import SamplerConfig
from swerl.rl.staleness import StalenessError, staleness
from swerl.rollout.store import TrajectoryStore
from swerl.util.settings import SeedSettings


class SamplesSettings(BaseModel):
    """How many trajectories a rollout samples per task."""

    samples: int = Field(1, ge=1, le=1024, description="Trajectories per task (G; the paper's DAPO uses 10; for an "
                         "evaluation, the runs k).")


class GradeSettings(BaseModel):
    """Whether a rollout grades its trajectories."""

    grade: bool = Field(True, description="Grade each trajectory's patch in a fresh sandbox as soon as it ends.")


class RolloutSettings(GradeSettings, SeedSettings, SamplesSettings):
    """A rollout's size, seed and grading, whoever asks for it (the runner, the stage, the Prefect form); each
    (task, sample, turn) derives its own seed from the base seed."""


class PolicyVersionSettings(BaseModel):
    """The policy version a rollout's trajectories are recorded under."""

    policy_version: str | None = Field(None, max_length=256, description="Recorded on every trajectory "
                                       "(training refuses other versions; staleness counts from it). None: the "
                                       "registry's version when the model is a registered alias, else \"0\".")


class StalenessSettings(BaseModel):
    """Which update a rollout's trajectories are for, so each records how stale it is."""

    trains_from: str | None = Field(None, max_length=256, description="The policy version the update that trains on "
                                    "this rollout starts from (an asynchronous pipeline samples iteration k+1 while "
                                    "iteration k trains); each trajectory records how many versions behind it its "
                                    "oldest turn is. None: not recorded.")


class RolloutConfig(RolloutSettings, StalenessSettings):
    """One rollout run."""

    model_config = ConfigDict(extra="forbid")

    sampler: SamplerConfig = Field(default_factory=SamplerConfig, description="How the trajectories are run: at once, the "
                                   "agent, its sandboxes, the grading and its shared verdicts, the reruns of a lost host "
                                   "(its engine fields name the engine the caller passes).")
    model_name: str = Field("", description="Recorded on every trajectory (model path or name).")


class RolloutSummary(BaseModel):
    """What a run did; figures over the trajectories produced in this call."""

    total: int
    skipped: int
    produced: int
    exit_reasons: dict[str, int]
    infra_failed: int = Field(0, description="Trajectories of this call that failed for infrastructure (never scored).")
    host_lost_retried: int = Field(0, description="Pairs run again because their sandbox's host was lost (each counted per rerun).")
    resolved: int
    graded: int
    grades_run: int = Field(0, description="Gradings run in a sandbox by this call; the other graded trajectories reused a verdict.")
    generation_s: float
    environment_s: float
    sandbox_s: float
    grading_s: float = Field(0.0, description="Waiting for verdicts, summed over trajectories.")
    wall_s: float
    action_tokens: int
    store: str
    policies_loaded: list[str] = Field(default_factory=list, description="Newer policies loaded while it sampled (an "
                                       "asynchronous pipeline's feed), in order.")
    reloads_failed: dict[str, str] = Field(default_factory=dict, description="Policies whose reload failed -> why (the "
                                           "rollout went on with the weights it had).")


class _Grades:
    """The gradings of one run: a distinct (task, patch) is graded once (with ``reuse_grades``) and, with
    ``grade_cache``, its verdict is kept for later runs."""

    def __init__(self, config: RolloutConfig, agent: Agent) -> None:
        self._config = config
        self._agent = agent
        self._verdicts: dict[tuple[str, str], asyncio.Future] = {}
        cache = config.sampler.grade_cache
        self._kept = JsonVerdictStore(cache, GradeResult) if cache and config.sampler.reuse_grades else None
        self._settings = grading_settings(config.sampler.grading)
        self.ran: list[str] = []  # instance ids graded in a sandbox (not reused)

    def _graded(self, task: Task, patch: str, digest: str, image: str, sample: int) -> GradeResult:
        key = content_key("swerl-grade-v1", task, image, digest, self._settings)
        if self._kept is not None and (hit := self._kept.get(key)) is not None:
            return hit
        self.ran.append(task.instance_id)
        result = grade_prediction(task, patch, image, self._config.sampler.grading,
                                  model_name=self._config.model_name or self._agent.engine.name, log_subdir=f"sample-{sample}")
        if self._kept is not None and not result.is_infra_error:  # an infrastructure failure says nothing about the patch
            self._kept.put(key, result)
        return result

    async def grade(self, task: Task, patch: str, image: str, sample: int) -> GradeResult:
        """The verdict on ``patch`` for ``task``; one grading in flight serves every repeat of the patch."""
        digest = hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()
        known = self._verdicts.get((task.instance_id, digest))
        stale = known is not None and known.done() and (known.exception() is not None or known.result().is_infra_error)
        if not self._config.sampler.reuse_grades or known is None or stale:
            known = self._verdicts[(task.instance_id, digest)] = asyncio.ensure_future(
                asyncio.to_thread(self._graded, task, patch, digest, image, sample))
        # shielded: a cancelled waiter must not cancel the grading that other repeats share
        return await asyncio.shield(known)


def _staleness(traj: Trajectory, trains_from: str | None) -> int | None:
    """How far behind ``trains_from`` the trajectory is; None when no update is named, or the versions have no place
    in the pipeline's order (a standalone rollout's registry versions)."""
    if trains_from is None:
        return None
    try:
        return staleness(traj, trains_from)
    except StalenessError:
        return None


def _thread_per_trajectory(concurrency: int) -> None:
    """Sandbox calls block: give every in-flight trajectory its own thread of the loop's default executor."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=concurrency + 4, thread_name_prefix="swerl-rollout"))


def _summary(tasks: Sequence[Task], config: RolloutConfig, pending: int, produced: list[Trajectory], retried: int,
             grades_run: int, start: float, store: TrajectoryStore) -> RolloutSummary:
    """What the run did, over the trajectories this call produced (``pending`` of them were due)."""
    reasons = Counter(t.exit_reason.value for t in produced)
    return RolloutSummary(
        total=len(tasks) * config.samples,
        skipped=len(tasks) * config.samples - pending,
        produced=len(produced),
        exit_reasons=dict(sorted(reasons.items())),
        infra_failed=sum(1 for t in produced if t.infra_failed),
        host_lost_retried=retried,
        resolved=sum(1 for t in produced if t.resolved),
        graded=sum(1 for t in produced if t.resolved is not None),
        grades_run=grades_run,
        generation_s=sum(t.generation_s for t in produced),
        environment_s=sum(t.environment_s for t in produced),
        sandbox_s=sum(t.sandbox_s for t in produced),
        grading_s=sum(t.grading_s for t in produced),
        wall_s=time.monotonic() - start,
        action_tokens=sum(t.n_action_tokens for t in produced),
        store=str(store.directory),
    )


async def run_rollouts(
    tasks: Sequence[Task],
    images: dict[str, str],
    engine: InferenceEngine,
    chat: ChatFormat,
    config: RolloutConfig,
    store: TrajectoryStore,
    on_done: Callable[[Trajectory], None] | None = None,
) -> RolloutSummary:
    """Roll out every (task, sample) not yet in ``store``; see the module docstring."""
    start = time.monotonic()
    done = store.done()
    pending = [(t, i) for t in tasks for i in range(config.samples) if (t.instance_id, i) not in done]
    agent = Agent(engine, chat, config.sampler.agent)
    slots = asyncio.Semaphore(config.sampler.concurrency)
    _thread_per_trajectory(config.sampler.concurrency)
    produced: list[Trajectory] = []
    grades = _Grades(config, agent)
    retried: list[str] = []

    async def one(task: Task, sample: int) -> None:
        for attempt in range(config.sampler.host_lost_retries + 1):
            async with slots:
                traj, host_lost = await _run_one(task, sample, images.get(task.instance_id), agent, config, grades.grade)
            if not host_lost or attempt == config.sampler.host_lost_retries:
                break
            retried.append(traj.trajectory_id)  # the lost attempt is dropped: its sandbox's host is gone, so is its run
        traj.model = config.model_name
        traj.staleness = _staleness(traj, config.trains_from)
        await asyncio.to_thread(store.append, traj)
        produced.append(traj)
        if on_done is not None:
            on_done(traj)

    await asyncio.gather(*(one(t, i) for t, i in pending))
    return _summary(tasks, config, len(pending), produced, len(retried), len(grades.ran), start, store)


async def _run_one(task: Task, sample: int, image: str | None, agent: Agent, config: RolloutConfig,
                   grade: Callable[[Task, str, str, int], Awaitable[GradeResult]]) -> tuple[Trajectory, bool]:
    """The pair's trajectory, and whether its sandbox's host was lost (a run worth doing again elsewhere)."""
    if image is None:
        return _failed(task, sample, agent, "no environment image for this task; run `swerl images build` first "
                       "(for a local sandbox: its repository is missing from the mirror folder)"), False
    t0 = time.monotonic()
    sandbox = make_sandbox(config.sampler.sandbox, image, base_commit=task.base_commit)
    try:
        await asyncio.to_thread(sandbox.start)
        await asyncio.to_thread(install_tools, sandbox)
    except Exception as e:  # isolated to this pair; the policy never acted
        await asyncio.to_thread(sandbox.close)
        # a sandbox that cannot start is the infrastructure's failure; anything else here is a bug in swerl
        reason = ExitReason.infra_error if isinstance(e, SandboxError) else ExitReason.error
        traj = _failed(task, sample, agent, f"sandbox start failed: {type(e).__name__}: {e}", reason)
        traj.sandbox_s = time.monotonic() - t0
        return traj, isinstance(e, HostLost)
    started = time.monotonic()
    try:
        traj = await agent.run(task, sandbox, sample_index=sample, seed=config.seed)
    finally:
        t1 = time.monotonic()
        await asyncio.to_thread(sandbox.close)
    traj.sandbox_s = (started - t0) + (time.monotonic() - t1)
    if traj.exit_reason is ExitReason.infra_error:  # after a start, only a lost host ends an agent's run this way
        return traj, True
    if config.grade and traj.exit_reason is not ExitReason.error:
        t2 = time.monotonic()
        result = await grade(task, traj.patch, image, sample)
        traj.grading_s = time.monotonic() - t2
        traj.grade_failure = result.failure_class.value if result.failure_class else None
        traj.tamper_flags = list(result.tamper_flags)
        traj.swebench_log_resolved = result.swebench_log_resolved
        traj.resolved = None if result.is_infra_error else result.resolved
        details = result.tests.values()
        traj.fail_to_pass_passed = sum(1 for d in details if d.expected == "FAIL_TO_PASS" and d.passed)
        traj.pass_to_pass_failed = sum(1 for d in details if d.expected == "PASS_TO_PASS" and not d.passed)
    return traj, False


def _failed(task: Task, sample: int, agent: Agent, message: str, reason: ExitReason = ExitReason.error) -> Trajectory:
    return Trajectory(
        instance_id=task.instance_id, sample_index=sample, trajectory_id=f"{task.instance_id}/{sample}",
        policy_version=agent.engine.policy_version, engine=agent.engine.name, exit_reason=reason, error=message,
    )


def rollout(tasks: Sequence[Task], images: dict[str, str], engine: InferenceEngine, chat: ChatFormat, config: RolloutConfig,
            out_dir: Path, on_done: Callable[[Trajectory], None] | None = None) -> RolloutSummary:
    """Synchronous entry point for the CLI and Prefect tasks."""
    return asyncio.run(run_rollouts(tasks, images, engine, chat, config, TrajectoryStore(out_dir), on_done))
