"""Flow: roll a policy out on a task set, G samples per task, in chunks (resumable)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows._hooks import HOOKS
from swerl.envs.images import ImageSettings
from swerl.orchestration.fanout import run_tasks
from swerl.orchestration.inputs import task_inputs
from swerl.orchestration.params import RolloutParams, SamplerParams
from swerl.orchestration.results import ChunkedRollout
from swerl.stages.rollout import RolloutStage, stage_tasks
from tasks.rollout import rollout_chunk


def rollout_stage(*, tasks, repos, model: str, out, samples: int, seed: int, policy_version: str, sampler: SamplerParams,
                  images: ImageSettings | None = None, grade: bool = True, container_label: str | None = None,
                  follow: Path | None = None,
                  trains_from: str | None = None) -> RolloutStage:
    """The stage of one rollout: its wiring, and the sampler's settings as they are (engine, agent, sampling, sandboxes);
    ``images``: how its tasks' images are built or found (a pipeline's: the images its images stage built)."""
    return RolloutStage(tasks=tasks, repos=repos, model=model, samples=samples, out=out, seed=seed, grade=grade,
                        policy_version=policy_version, run_id=container_label, sampler=sampler.config(),
                        images=images if images is not None else ImageSettings(), follow=follow, trains_from=trains_from)


def run_chunks(stage: RolloutStage, chunk_size: int | None, timeout_s: float, *,
               dask_address: str | None = None) -> ChunkedRollout:
    """Submit one rollout task per chunk of the stage's tasks (all into the same store) and wait for them; on
    the Dask cluster at ``dask_address`` when given."""
    ids = [t.instance_id for t in stage_tasks(stage)]  # a caller's subset is chunked, never widened to the file
    size = chunk_size or len(ids)
    chunks = [ids[i:i + size] for i in range(0, len(ids), size)]
    chunk_task = rollout_chunk.with_options(timeout_seconds=timeout_s)
    if len(chunks) == 1 and dask_address is None:
        results = [chunk_task(stage, 0)]
    else:
        calls = [{"stage": stage.model_copy(update={"instance_ids": chunk}), "chunk": n} for n, chunk in enumerate(chunks)]
        results = run_tasks(chunk_task, calls, dask_address=dask_address)
    return ChunkedRollout.of(results)


@flow(name="rollout", log_prints=True, **HOOKS)
def rollout(params: RolloutParams) -> ChunkedRollout:
    """G graded trajectories per task from one policy, appended to OUT/trajectories (resumable)."""
    from tasks.tracking import resolve_policy

    tasks, repos = task_inputs(params.tasks, params.repos)
    policy = resolve_policy(params.tracking, params.model)
    stage = rollout_stage(tasks=tasks, repos=repos, model=policy.path, out=params.out, samples=params.samples,
                          seed=params.seed, policy_version=params.policy_version or policy.policy_version,
                          sampler=params.sampler, images=params.images, grade=params.grade)
    result = run_chunks(stage, params.sampler.chunk_size, params.sampler.chunk_timeout_s,
                        dask_address=params.sampler.dask_address)
    print(f"{result.produced} new trajectories ({result.skipped} already stored) in {result.store}")
    return result
