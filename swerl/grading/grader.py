"""Grade a prediction the way an attacker cannot game: a FRESH sandbox, the agent's diff only,
test files restored, the task's test patch, the tests, and two accounts of their outcome.

Steps, each in the same new container (network off):
1. split the agent's diff and drop every section that touches tests, test configuration,
   interpreter hooks, ``.git`` or paths outside the repository (reported as dropped);
2. apply the rest (``git apply``, then ``patch --fuzz`` as SWE-bench does);
3. put every file of the test patch back to base_commit, then apply the test patch (a
   SWE-bench 5 record's own ``eval_script`` applies it itself: it is only checked);
4. lock the repository down (``swerl.grading.test_user``): the test command runs as an
   unprivileged user who can create files but change none of root's, and reach pytest's
   evidence only through a pipe root copies into a folder only root opens;
5. run the tests between SWE-bench's markers (the record's ``eval_script``, or
   ``install_config``'s test command) with a hard timeout that kills the whole process tree,
   then kill every process of the test user and list what the tests planted;
6. decide with swebench's own grading on the log (``swerl.grading.judge``) and, for pytest,
   compare with the events of a plugin whose module name is random per run
   (``swerl.grading.evidence``): a forged "PASSED" line disagrees with them.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from docker.errors import DockerException
from pydantic import BaseModel, Field

from swerl.data.task import Task
from swerl.envs.docker_sandbox import DockerSandboxConfig, concurrency_slots
from swerl.envs.factory import SandboxConfig, make_sandbox
from swerl.envs.sandbox import ExecResult, RunnerFailed, Sandbox, SandboxError, run_alone
from swerl.grading.evidence import MalformedReport, RootAnswer, report_from_events, root_answer, tripwire_records
from swerl.grading.judge import START_TEST_OUTPUT, added_hooks, judge
from swerl.grading.plan import Logs, Plan, make_plan
from swerl.grading.protected import ProtectedPathsConfig
from swerl.grading.results import FailureClass, GradeResult

SETUP_ALLOWANCE_S = 120.0  # the whole exec's limit: the set-up and the report, on top of the tests' own time limit


class GradingSandboxesSettings(BaseModel):
    """How many gradings run at once."""

    grading_sandboxes: int = Field(2, ge=1, le=256, description="Grading sandboxes at once (per chunk of predictions "
                                   "where a flow splits them); each holds a test run's memory and CPUs.")


class GradingConfig(BaseModel):
    """How predictions are graded."""

    test_timeout_s: float = Field(900.0, gt=0, le=86400, description="Hard limit on the test command alone (set-up and report not counted); "
                                  "every process of the test user is killed at it and the grading is TIMEOUT.")
    sandbox: SandboxConfig = Field(
        default_factory=lambda: DockerSandboxConfig(output_limit_bytes=4_000_000, sweep_after_exec=True),
        description="Container limits for grading sandboxes (network off).",
    )
    protected: ProtectedPathsConfig = Field(default_factory=ProtectedPathsConfig, description="Diff sections never applied.")
    infra_retries: int = Field(1, ge=0, le=5, description="Fresh-sandbox retries after an infrastructure error.")
    grading_logs: Path | None = Field(None, description="Where each grading's patch, test log and report are kept "
                                      "(None: the run's own logs folder, e.g. LOG_DIR/grading; none outside a run).")
    run_tests_without_patch: bool = Field(False, description="Run the tests even for an empty patch (task validation).")
    canaries: bool = Field(True, description="Add copies of the FAIL_TO_PASS tests with known outcomes (one must fail, one "
                           "must pass); a run where either is flipped is graded 'tampered'.")
    test_user: bool = Field(True, description="Run the test command as an unprivileged user who cannot change the "
                            "repository's files, signal swerl's processes or reach pytest's evidence (off only to "
                            "test the other layers alone).")
    tripwire: bool = Field(True, description="Install swerl's audit hook into the tests' interpreter (records, from the "
                           "agent's files, the operations that tamper with a test run in-process; off only to test the "
                           "other layers alone). Needs the test user.")
    repair_patches: bool = Field(False, description="Mend what swebench's harness refuses before applying (a missing "
                                 "final newline, hunk counts that disagree with their bodies), recorded on the result; "
                                 "off, a patch swebench cannot apply is apply_failed, as the official harness grades it.")
    test_uid: int = Field(54321, ge=1000, le=2**31 - 2, description="The unprivileged user's id in the sandbox.")

    def for_run(self, log_dir: Path, run_id: str, **changes: Any) -> GradingConfig:
        """A copy for one run: logs under ``log_dir`` (unless ``grading_logs`` is set), sandboxes labelled ``run_id``."""
        config = self.model_copy(update={"grading_logs": self.grading_logs or log_dir, **changes}, deep=True)
        config.sandbox.run_id = run_id
        return config


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", name)[:120]


def _grade_in(sandbox: Sandbox, task: Task, plan: Plan, config: GradingConfig, logs: Logs,
              result: GradeResult) -> GradeResult:
    run = run_alone(sandbox, plan.command, timeout=config.test_timeout_s + SETUP_ALLOWANCE_S)
    answer, output = _read_root_answer(run, plan)
    logs.write("setup.log", answer.setup_log)
    setup = answer.setup or {}
    if setup.get("code") != 0:
        return _setup_failed(setup.get("stage") or "start", answer, run.exit_code, result)
    if not plan.no_patch and setup.get("via"):
        result.applied_with = setup["via"]
    _note_guarded(answer.guard, result)
    _, found, tests_output = output.partition(plan.tests_line + "\n")
    if not found:
        raise SandboxError("the tests' start line is missing from the grading's output")
    logs.write("test_output.txt", tests_output)
    logs.write("root.json", answer.model_dump_json(indent=1, exclude={"events", "setup_log"}))
    result.test_exit_code = run.exit_code
    if plan.audited and answer.finish is None and START_TEST_OUTPUT in tests_output:
        # the tests started and root's helper left no findings: they starved it (disk, processes), or swerl broke
        raise RunnerFailed("root's helper left no record of the tests' end (audit, timeout, tripwire)")
    finish = answer.finish or {}
    # the tests' own limit is kept in the container (the helper kills them and says so); the exec's, which
    # also covers the set-up and root's answer, is the net for a sandbox without a test user
    if run.timed_out or finish.get("timed_out") is True:
        result.failure_class = FailureClass.TIMEOUT
        result.reason = f"tests did not finish within {config.test_timeout_s:.0f}s; every process they started was killed"
        return result
    tampering, report = _tampering_and_report(sandbox, plan, answer, finish, config.sandbox.workdir)
    if tampering:
        result.failure_class, result.log_valid, result.reason = FailureClass.TAMPERED, False, tampering
        return result
    logs.write("report.json", json.dumps(report, indent=1))
    if report and report.get("collect_errors"):
        # a test command run with --tb=no prints no traceback: the kept log gets pytest's own
        logs.write("test_output.txt", tests_output + _collection_tracebacks(report["collect_errors"]))
    return _judged(task, plan, run, answer, report, tests_output, result)


def _read_root_answer(run: ExecResult, plan: Plan) -> tuple[RootAnswer, str]:
    """Root's answer and the output before it; raises when it is missing or does not read (blame decides whose
    fault that was once the tests ran)."""
    try:
        answer, output = root_answer(run.output, plan.frame_prefix)
    except (ValueError, OSError, EOFError) as e:  # tarfile's errors are OSError's and ValueError's kin
        # the tests can neither write nor cut root's line, but they can starve the disk it is written from
        raise RunnerFailed(f"root's answer does not read: {e}") from None
    if answer is None:
        if run.timed_out:
            raise SandboxError("grading did not finish within the time allowed (root's answer never came)")
        # once the tests ran, only they could have starved root (its disk, its processes): blame decides
        started = ("\n" + plan.tests_line + "\n") in ("\n" + run.output)
        error = RunnerFailed if started else SandboxError
        raise error(f"root's answer is missing from the grading's output (exit {run.exit_code}): {run.output[-500:]}")
    return answer, output


def _note_guarded(guarded: dict | None, result: GradeResult) -> None:
    """Protected files the container guard put back or removed are named as dropped, and flag the patch."""
    if guarded is None:
        return
    for path, reason in {**guarded.get("restored", {}), **guarded.get("removed", {})}.items():
        result.dropped_files[path] = f"changed in the container although protected ({reason}); put back"
    if guarded.get("restored") or guarded.get("removed"):
        result.tamper_flags = sorted(set(result.tamper_flags) | {"protected_paths"})


def _tampering_and_report(sandbox: Sandbox, plan: Plan, answer: RootAnswer, finish: dict,
                          workdir: str) -> tuple[str, dict | None]:
    """Why the run is tampered ('' when it is not), from root's findings, pytest's evidence and the tripwire's
    hellos, and pytest's report (None without one). Evidence that does not read is the tests' doing."""
    try:
        tampering = _root_findings(plan, answer, finish)
        report = None
        if plan.script.runs_pytest:
            report = (report_from_events(answer.events) if answer.events is not None
                      else _read_report(sandbox, plan.events_path))
    except MalformedReport as e:  # whatever the events hold, reading them raises nothing else
        tampering = f"pytest's evidence holds something the plugin never sends: {e}"
        report = None
    if report is not None and not tampering:
        tampering = added_hooks(report.get("hooks") or [], workdir, (answer.guard or {}).get("changed") or [],
                                plan.added_defs, tuple((answer.pre_tests or {}).get("runner") or ()))
    if plan.tripwire and report is not None:
        if answer.pre_tests is None:
            raise SandboxError("pytest ran but root's step before the tests (canaries, tripwire) left no record")
        if answer.pre_tests.get("error"):
            raise SandboxError(f"root could not install the tripwire into the tests' interpreter: {answer.pre_tests['error']}")
        if not tampering and answer.pre_tests.get("tripwire") and tripwire_records(str(finish.get("tripwire", "")))[1] == 0:
            tampering = "pytest ran in an interpreter that never started the tripwire root installed"
    return tampering, report


def _judged(task: Task, plan: Plan, run: ExecResult, answer: RootAnswer, report: dict | None, tests_output: str,
            result: GradeResult) -> GradeResult:
    """``result`` with swebench's verdict on the tests' log; swerl's checks (pytest's evidence, the canaries)
    can only take a resolution away."""
    script = plan.script
    if script.exit_code_is_tests:
        exit_code = run.exit_code
    else:  # the published script ends with a `git checkout`: pytest's own status is the tests'
        exit_code = report["exitstatus"] if report else None  # an int: report_from_events made sure
    canaries = (answer.canaries or {}).get("built") or [] if plan.canaries else []
    result.canaries_not_built = dict((answer.canaries or {}).get("not_built") or {}) if plan.canaries else {}
    verdict = judge(task, tests_output, report, exit_code, script.runs_pytest, truncated=run.truncated,
                    parser=plan.parser, canaries=canaries)
    result.tests, result.log_valid, result.swebench_log_resolved = verdict.tests, verdict.log_valid, verdict.swebench_log_resolved
    result.resolved = bool(verdict.resolved and not plan.no_patch and result.tests)
    if verdict.tampered:
        result.failure_class = FailureClass.TAMPERED
    if result.failure_class is None and not result.resolved:
        result.failure_class = FailureClass.NO_PATCH if plan.no_patch else FailureClass.TESTS_FAILED
    result.reason = verdict.reason if not result.reason else f"{result.reason}; {verdict.reason}"
    return result


def _setup_failed(stage: str, answer: RootAnswer, exit_code: int | None, result: GradeResult) -> GradeResult:
    """The verdict when a set-up step failed (no code under test ran): the patch's, the task's, or swerl's."""
    tail = answer.setup_log[-800:]
    if stage == "apply":
        result.failure_class, result.reason = FailureClass.APPLY_FAILED, f"patch does not apply: {tail}"
        return result
    if stage == "guard":
        refused = (answer.guard or {}).get("refused")
        if not refused:  # the guard itself failed: swerl's problem, not the patch's
            raise SandboxError(f"the path guard failed (exit {exit_code}): {tail[-500:]}")
        result.failure_class, result.log_valid = FailureClass.TAMPERED, False
        result.reason = ("the patch changed protected paths that cannot be put back: "
                         + "; ".join(f"{p}: {r}" for p, r in list(refused.items())[:5]))
        return result
    if stage == "test_patch":
        result.failure_class = FailureClass.TASK_BROKEN
        result.reason = f"the task's test patch does not apply to base_commit (task is broken): {tail[-500:]}"
        return result
    raise SandboxError(f"grading set-up failed at {stage} (exit {exit_code}): {tail[-500:]}")


def _root_findings(plan: Plan, answer: RootAnswer, finish: dict) -> str:
    """Why root's own findings make the run tampered ('' when they do not): files the tests planted, the
    tripwire's records."""
    if not plan.audited or not finish:
        return ""
    planted = finish.get("audit") or {}  # root's own JSON: a dict of path -> reason
    if planted:
        return ("the tests created files that change how tests are collected or how Python starts: "
                + "; ".join(f"{p} ({r})" for p, r in list(planted.items())[:5]))
    records, _ = tripwire_records(str(finish.get("tripwire") or ""))
    if records:
        return ("the tripwire recorded what code under test may not do in a test run (the agent's code, "
                "attributed by its frames): " + "; ".join(records[:5]))
    return ""


def _collection_tracebacks(errors: list) -> str:
    parts = ["\n===== swerl: collection errors recorded by pytest (not part of the graded log) ====="]
    for err in errors[:20]:
        if isinstance(err, dict):
            parts += [f"--- {err.get('nodeid') or '<session>'}", str(err.get("longrepr") or "")]
    return "\n".join(parts) + "\n"


def _read_report(sandbox: Sandbox, path: str) -> dict | None:
    """The events read from the sandbox (too large to print); None when there are none."""
    try:
        raw = sandbox.read_file(path, max_bytes=64_000_000)
    except (FileNotFoundError, IsADirectoryError):
        return None
    except SandboxError as e:
        raise MalformedReport(str(e)) from None
    return report_from_events(raw)


def _load_swebench() -> None:
    """Import the swebench modules grading calls (seconds the first time in a process; nothing after)."""
    try:
        import swebench.harness.grading  # noqa: F401
        import swebench.harness.log_parsers  # noqa: F401
        import swebench.harness.utils  # noqa: F401
    except ImportError:  # the grading that needs one says so, as a result
        pass


def grade_prediction(task: Task, patch: str | None, image: str, config: GradingConfig, *,
                     model_name: str = "", slots: threading.BoundedSemaphore | None = None,
                     log_subdir: str | None = None) -> GradeResult:
    """Grade ``patch`` for ``task`` in a fresh sandbox of ``image``; never raises for bad input."""
    _load_swebench()  # before the clock: ``duration_s`` is this grading's time, not a process's first imports
    start = time.monotonic()
    logs = Logs(config.grading_logs / task.instance_id / (log_subdir or _safe(model_name or "prediction"))
                 if config.grading_logs else None)
    logs.write("patch.diff", patch or "")
    if not (patch or "").strip() and not config.run_tests_without_patch:
        result = GradeResult(instance_id=task.instance_id, resolved=False, image=image,
                             failure_class=FailureClass.NO_PATCH, reason="the prediction has an empty patch")
        attempts = 0
    else:
        # only a failing sandbox is retried; an infra error the task itself causes would fail again
        runner_failures = 0
        for attempts in range(1, config.infra_retries + 2):
            try:
                result = _attempt(task, patch or "", image, config, slots, logs)
                break
            except RunnerFailed as e:  # the runner died or answered garbage while the tests ran
                runner_failures += 1
                result = _infra(task, image, e)
            except (SandboxError, DockerException, OSError) as e:
                result = _infra(task, image, e)
            except Exception as e:  # a bug of swerl's costs this prediction an infra error, never the caller's run
                result = _infra(task, image, e)
                break
        if runner_failures >= 2 and (patch or "").strip():
            result = _blame(task, image, config, slots, result)
    _name_dropped(result)
    result.model_name_or_path, result.attempts = model_name, attempts
    result.duration_s = round(time.monotonic() - start, 3)
    result.log_dir = str(logs.root) if logs.root else None
    logs.write("result.json", result.model_dump_json(indent=1))
    return result


def _name_dropped(result: GradeResult) -> None:
    """Every file swerl did not apply or put back is named in the reason, not only in ``dropped_files``."""
    if not result.dropped_files or result.reason.startswith("every file"):  # that reason names them already
        return
    named = "; ".join(f"{p} ({r})" for p, r in list(result.dropped_files.items())[:10])
    more = f" and {len(result.dropped_files) - 10} more" if len(result.dropped_files) > 10 else ""
    prefix = f"swerl did not apply {len(result.dropped_files)} file(s) of the patch: {named}{more}"
    result.reason = f"{prefix}; {result.reason}" if result.reason else prefix


def _attempt(task: Task, patch: str, image: str, config: GradingConfig, slots: threading.BoundedSemaphore | None,
             logs: Logs) -> GradeResult:
    """One grading in one fresh sandbox; raises SandboxError (RunnerFailed while the tests ran) on infrastructure."""
    result = GradeResult(instance_id=task.instance_id, resolved=False, image=image)
    plan = make_plan(task, patch, config, result, logs)
    if plan is None:  # decided without running anything: a bad diff, every file dropped, a broken task
        return result
    sandbox = make_sandbox(config.sandbox, image, slots=slots, base_commit=task.base_commit, preload=plan.files)
    try:
        return _grade_in(sandbox, task, plan, config, logs, result)
    finally:
        sandbox.close()


def _infra(task: Task, image: str, error: Exception) -> GradeResult:
    return GradeResult(instance_id=task.instance_id, resolved=False, image=image,
                       failure_class=FailureClass.INFRA_ERROR, reason=f"{type(error).__name__}: {error}")


def _blame(task: Task, image: str, config: GradingConfig, slots: threading.BoundedSemaphore | None,
           failed: GradeResult) -> GradeResult:
    """The runner died twice while this patch's tests ran: the patch did it, unless the tests without it do too."""
    try:
        _attempt(task, "", image, config.model_copy(update={"run_tests_without_patch": True, "grading_logs": None}), slots,
                 Logs(None))
    except (SandboxError, DockerException, OSError) as e:
        failed.reason += f"; the tests without the patch failed the same way ({type(e).__name__}), so it is the infrastructure"
        return failed
    return GradeResult(instance_id=task.instance_id, resolved=False, image=image, failure_class=FailureClass.TAMPERED,
                       reason=f"the sandbox's runner died or was forged twice while this patch's tests ran, and the "
                       f"tests run cleanly without the patch: {failed.reason[:400]}")


def grade_many(jobs: Sequence[tuple[Task, str | None, str | None, str]], config: GradingConfig, *, concurrency: int = 2,
               progress: Callable[[GradeResult], None] | None = None,
               on_result: Callable[[int, GradeResult], None] | None = None,
               build_errors: dict[str, str] | None = None) -> list[GradeResult]:
    """Grade (task, patch, image, model_name) jobs in parallel; a job without an image is an infra error
    whose reason is the task's entry in ``build_errors`` when there is one.

    ``on_result(job_index, result)`` is called once per job as it finishes, under a lock.
    """
    lock = threading.Lock()
    slots = concurrency_slots(concurrency)

    def one(job: tuple[Task, str | None, str | None, str], index: int) -> GradeResult:
        task, patch, image, model = job
        try:
            res = graded(task, patch, image, model, index)
        except Exception as e:  # a grader bug must cost one result, never the run
            res = GradeResult(instance_id=task.instance_id, model_name_or_path=model, resolved=False,
                              failure_class=FailureClass.INFRA_ERROR, reason=f"internal grading error: {type(e).__name__}: {e}")
        if progress:
            progress(res)
        if on_result:
            with lock:
                on_result(index, res)
        return res

    def graded(task: Task, patch: str | None, image: str | None, model: str, index: int) -> GradeResult:
        if image is None:
            return GradeResult(instance_id=task.instance_id, model_name_or_path=model, resolved=False,
                               failure_class=FailureClass.INFRA_ERROR,
                               reason=f"image build failed: {(build_errors or {}).get(task.instance_id) or 'no image for this task'}")
        return grade_prediction(task, patch, image, config, model_name=model, slots=slots,
                                log_subdir=f"{_safe(model or 'prediction')}-{index}")

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, jobs, range(len(jobs))))
