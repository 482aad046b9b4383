"""Infrastructure failures mean what they say: never scored, redone by a rerun, and a stage with too
many of them fails as retryable.

A pair is infrastructure-failed when its sandbox never started (exit ``infra_error``) or
grading's own sandbox failed (grade failure ``infra_error``).
"""

from __future__ import annotations

from collections import Counter

import pytest

from swerl.agent.loop import AgentConfig
from swerl.agent.trajectory import ExitReason, Trajectory
from swerl.envs.flaky_sandbox import FlakySandboxConfig
from swerl.envs.local_sandbox import LocalSandboxConfig, local_sandbox_folders
from swerl.eval.report import build_report
from swerl.rollout.store import TrajectoryStore
from swerl.stages.errors import InfraFailureRate, RetryableStageError
from swerl.stages.rollout import RolloutStage, SamplerConfig, check_infra_failures, run_rollout


def traj(iid: str, k: int, resolved: bool | None = False, reason: ExitReason = ExitReason.submitted, **kw) -> Trajectory:
    return Trajectory(instance_id=iid, sample_index=k, trajectory_id=f"{iid}/{k}", policy_version="0", exit_reason=reason,
                      resolved=resolved, num_turns=0 if reason is ExitReason.infra_error else 4, **kw)


def start_failed(iid: str, k: int) -> Trajectory:
    return traj(iid, k, None, ExitReason.infra_error, error="sandbox start failed: SandboxError: daemon gone")


def grading_failed(iid: str, k: int) -> Trajectory:
    return traj(iid, k, None, grade_failure="infra_error")


def test_a_failed_start_and_a_failed_grading_are_infrastructure_failures_and_nothing_else_is():
    assert start_failed("a", 0).infra_failed and grading_failed("a", 0).infra_failed
    assert not traj("a", 0, None, ExitReason.error, error="engine died").infra_failed  # the run happened: the policy's
    assert not traj("a", 0, False, grade_failure="tests_failed").infra_failed


def test_a_rerun_redoes_infrastructure_failures_and_errors_and_keeps_the_rest(tmp_path):
    store = TrajectoryStore(tmp_path)
    for t in (traj("a", 0, True), start_failed("a", 1), grading_failed("b", 0), traj("b", 1, None, ExitReason.error)):
        store.append(t)
    assert store.done() == {("a", 0)}
    assert store.infra_failures() == {("a", 1): "sandbox start failed: SandboxError: daemon gone",
                                      ("b", 0): "grading: infra_error"}
    store.append(traj("a", 1, True))  # the rerun's part replaces the failed one
    assert store.done() == {("a", 0), ("a", 1)} and list(store.infra_failures()) == [("b", 0)]


def test_evaluation_leaves_infrastructure_failures_out_of_every_figure_and_lists_them():
    trajs = [traj("a", 0, True), start_failed("a", 1), traj("b", 0, False), traj("b", 1, True),
             grading_failed("c", 0), traj("c", 1, False)]
    report = build_report(trajs, runs=2)
    # run 0: a resolved, b not (c has no verdict) -> 1/2; run 1: b resolved, c not (a has none) -> 1/2
    assert (report.pass_at_1, report.pass_at_1_sem, report.pass_at_1_per_run) == (0.5, 0.0, [0.5, 0.5])
    # Pass@1 per task over its verdicts: a 1/1, b 1/2, c 0/1; Pass@2 only where two verdicts exist: b
    assert report.pass_at_k == {1: 0.5, 2: 1.0}
    assert (report.infra_failed, report.infra_failed_ids, report.ungraded) == (2, ["a/1", "c/0"], 0)
    assert report.per_task == {"a": [True, None], "b": [False, True], "c": [None, False]}
    assert report.mean_turns == 4.0  # of the four runs with a verdict


def test_a_run_that_ended_in_an_error_still_counts_unresolved():
    report = build_report([traj("a", 0, True), traj("b", 0, None, ExitReason.error, error="engine died")], runs=1)
    assert (report.pass_at_1, report.ungraded, report.infra_failed) == (0.5, 1, 0)


def test_a_run_without_any_verdict_has_no_pass_at_1():
    with pytest.raises(ValueError, match="run 1 has no verdict on any task"):
        build_report([traj("a", 0, True), start_failed("a", 1)], runs=2)


def test_the_bound_is_a_share_of_all_pairs_and_reaching_it_is_allowed(tmp_path):
    from swerl.data.task import Task

    store = TrajectoryStore(tmp_path)
    for t in (start_failed("t0", 0), *(traj(f"t{i}", 0) for i in range(1, 5))):
        store.append(t)
    tasks = [Task.model_construct(instance_id=f"t{i}") for i in range(5)]
    check_infra_failures(store, tasks, samples=1, bound=0.2)  # 1 of 5 is 20%: not over
    with pytest.raises(InfraFailureRate, match=r"^1 of 5 \(task, sample\) pairs \(20%\) failed for infrastructure, over "
                       r"the bound of 0% \(max_infra_failure_rate\); e\.g\. t0/0: sandbox start failed: SandboxError: "
                       r"daemon gone\. Rerun the stage: it keeps the finished pairs and redoes only these\.$") as err:
        check_infra_failures(store, tasks, samples=1, bound=0.0)
    assert isinstance(err.value, RetryableStageError) and (err.value.failed, err.value.total) == (1, 5)
    check_infra_failures(store, tasks[1:], samples=1, bound=0.0)  # t0 is not this chunk's


def test_a_stage_with_one_start_in_three_failing_fails_as_retryable_and_its_rerun_completes(
        demo, demo_tasks, tiny_model_dir, tmp_path, run_id):
    sandboxes = tmp_path / "sandboxes"
    stage = RolloutStage(tasks=demo.tasks_file, repos=demo.repos_dir, model=str(tiny_model_dir), grade=False,
                         out=tmp_path / "run", log_dir=tmp_path / "logs", run_id=run_id, sampler=SamplerConfig(
                             engine="scripted", concurrency=3, agent=AgentConfig(max_turns=20),
                             sandbox=FlakySandboxConfig(fail_every=3, inner=LocalSandboxConfig(parent_dir=sandboxes))))
    store = TrajectoryStore(tmp_path / "run" / "trajectories")

    # starts 1..9: the 3rd, 6th and 9th fail, 3 of 9 pairs (33%) over the default bound of 20%
    with pytest.raises(InfraFailureRate, match=r"^3 of 9 \(task, sample\) pairs \(33%\) failed for infrastructure, "
                       r"over the bound of 20%") as err:
        run_rollout(stage)
    assert isinstance(err.value, RetryableStageError)
    first = {t.instance_id: t for t in store.trajectories()}
    assert Counter(t.exit_reason.value for t in first.values()) == {"submitted": 6, "infra_error": 3}
    assert all("injected start failure" in t.error for t in first.values() if t.infra_failed)

    # starts 10..12 redo only the three failed pairs; the 12th fails: 1 of 9 (11%) is within the bound
    result = run_rollout(stage)
    s = result.summary
    assert (s.total, s.skipped, s.produced, s.infra_failed, s.exit_reasons) == (9, 6, 3, 1, {"infra_error": 1, "submitted": 2})
    second = {t.instance_id: t for t in store.trajectories()}
    assert Counter(t.exit_reason.value for t in second.values()) == {"submitted": 8, "infra_error": 1}
    kept = [iid for iid, t in first.items() if not t.infra_failed]
    assert all(second[iid] == first[iid] for iid in kept)  # finished pairs are never run again
    assert local_sandbox_folders(run_id, sandboxes) == []


def test_a_stage_over_its_infrastructure_bound_is_retried_by_prefect_and_bad_input_is_not():
    from swerl.stages.errors import InfraFailureRate, StageInputError
    from tasks.common import _infrastructure

    assert _infrastructure(InfraFailureRate("3 of 9", failed=3, total=9, bound=0.2)) is True
    assert _infrastructure(StageInputError("no such task file")) is False
