"""Deciding resolution from a test log: swebench's own grading, with swerl's evidence checks on top.

Resolution is what ``swebench.harness.grading`` says for the log (``get_logs_eval``,
``get_eval_tests_report``, ``get_resolution_status``), called, not re-implemented, so a
published record grades as its publisher grades it, for both eval types. swerl can only
take a resolution away, never grant one: where the tests ran under pytest, a plugin with a
random module name recorded pytest's own outcome of every node, and a log that disagrees
with it (a forged ``PASSED`` line, a listed test pytest never ran), a missing report, or a
failing exit with no failure in the log makes the log invalid.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

from swerl.data.task import Task
from swerl.grading.log_parsers import FAILING, LogParser, get_log_parser
from swerl.grading.results import TestDetail
from swerl.grading.test_ids import all_passing, group_by_parser_form, lookup

START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
ERROR_LINE = re.compile(r"(Error|Exception|error:|ERROR|Traceback|No module named|not found)")
MAX_EVIDENCE_CHARS = 1500


@dataclass
class Judgement:
    """What the log and pytest's report say about one graded run."""

    tests: dict[str, TestDetail] = field(default_factory=dict)
    resolved: bool = False
    reason: str = ""
    log_valid: bool = True
    swebench_log_resolved: bool = False  # swebench's verdict on the same log, before swerl's checks
    tampered: bool = False  # a canary was flipped: outcomes were forced
    status_map: dict[str, str] = field(default_factory=dict)


def swebench_status_map(task: Task, log: str) -> tuple[dict[str, str], bool]:
    """``get_logs_eval`` on ``log``: the parsed statuses, and whether the log holds a usable test run."""
    from swebench.harness.grading import get_logs_eval
    from swebench.types import TestSpec

    spec = TestSpec(instance_id=task.instance_id, image=task.prebuilt_image or "", eval_script_list=[], repo=task.repo,
                    version=task.version or "", FAIL_TO_PASS=list(task.FAIL_TO_PASS), PASS_TO_PASS=list(task.PASS_TO_PASS),
                    log_parser=task.parser_name, eval_type=task.eval_type)
    fd, path = tempfile.mkstemp(prefix="swerl-log-", suffix=".txt")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(log)
        status_map, found = get_logs_eval(spec, path)
    finally:
        os.unlink(path)
    return {k: str(getattr(v, "value", v)).upper() for k, v in status_map.items()}, found


def swebench_report(task: Task, status_map: Mapping[str, str]) -> tuple[dict, bool]:
    """``get_eval_tests_report`` and ``get_resolution_status`` for the task's listed tests."""
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, EvalType, ResolvedStatus
    from swebench.harness.grading import get_eval_tests_report, get_resolution_status

    gold = {"instance_id": task.instance_id, FAIL_TO_PASS: list(task.FAIL_TO_PASS), PASS_TO_PASS: list(task.PASS_TO_PASS)}
    report = get_eval_tests_report(dict(status_map), gold, eval_type=EvalType(task.eval_type))
    return report, get_resolution_status(report) == ResolvedStatus.FULL.value


def judge(task: Task, log: str, report: dict | None, exit_code: int | None, is_pytest: bool, *,
          truncated: bool = False, parser: LogParser | None = None, canaries: list[dict] | None = None) -> Judgement:
    """Decide one run. ``exit_code`` is the test command's own status (None when unknown);
    ``report`` is the swerl plugin's record of pytest's outcomes (None when absent); ``canaries`` are the
    copies root wrote into the test files (``swerl.grading.canaries``), each of which must have run."""
    parser = parser or get_log_parser(task.parser_name)
    status_map, found, groups = _log_statuses(task, log, report, is_pytest, truncated, parser)
    verdict = Judgement(status_map=status_map)
    tests_report, resolved = swebench_report(task, status_map)
    verdict.swebench_log_resolved = found and resolved
    verdict.tests, unearned = _listed_tests(task, status_map, tests_report)
    problems = []
    if not found:
        problems.append("the log holds no test run swebench can grade (no output between the test markers, "
                        "a harness failure marker, or an exit code that contradicts it)")
    if is_pytest:
        problems += _disagreements(verdict.tests, report, groups)
        broken = (canary_problems(report, canaries or [], frozenset([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]))
                  + repeated_runs(report, task))
        if broken:
            verdict.tampered = True
            problems = broken + problems
    if exit_code not in (None, 0) and not any(s in FAILING for s in status_map.values()):
        problems.append(f"test command exited {exit_code} while the log shows no failure")
    verdict.log_valid = not problems
    verdict.resolved = verdict.log_valid and verdict.swebench_log_resolved and not unearned
    verdict.reason = _reason(verdict, problems, unearned)
    if any(d.status == "MISSING" and not d.passed for d in verdict.tests.values()):
        evidence = collection_evidence(report, log)
        if evidence:
            verdict.reason += f"; {evidence}"
    return verdict


def _log_statuses(task: Task, log: str, report: dict | None, is_pytest: bool, truncated: bool,
                  parser: LogParser) -> tuple[dict[str, str], bool, dict[str, list[str]]]:
    """The statuses the log gives (swebench's reading, else the task's parser on the test region), whether
    swebench found a usable test run in it, and pytest's outcomes grouped by the parser's form of their ids."""
    status_map, found = swebench_status_map(task, log)
    groups = group_by_parser_form(_outcomes(report), parser) if is_pytest else {}
    if truncated and found:
        # the middle of a huge log is gone: pytest's report speaks for the tests the log lost
        status_map = {**{form: _worst(s) for form, s in groups.items()}, **status_map}
    if not found:
        # swebench refuses the log (a failure marker, an exit code that contradicts it): still read what
        # it claims, so the per-test detail and the reason say what went wrong; it resolves nothing
        status_map = parser(_test_region(log))
    return status_map, found, groups


def _listed_tests(task: Task, status_map: Mapping[str, str], tests_report: dict) -> tuple[dict[str, TestDetail], bool]:
    """Each listed test's status and whether it passed as swebench reports it, a pass taken back where its status
    is not earned; and whether one was."""
    succeeded = set()
    for kind in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        succeeded.update(tests_report.get(kind, {}).get("success", []))
    tests, unearned = {}, False
    by_form = {k: [v] for k, v in status_map.items()}  # once, not per listed test: there can be thousands
    for kind, names in (("FAIL_TO_PASS", task.FAIL_TO_PASS), ("PASS_TO_PASS", task.PASS_TO_PASS)):
        for name in names:
            seen = lookup(name, by_form)
            status = seen[0] if seen else "MISSING"
            passed = name in succeeded
            if passed and not status_earned(status, kind, task.gold_statuses.get(name)):
                passed, unearned = False, True
            tests[name] = TestDetail(expected=kind, status=status, passed=passed)
    return tests, unearned


def _reason(verdict: Judgement, problems: list[str], unearned: bool) -> str:
    """Why the run is or is not resolved: the evidence's problems first, else the tests not passing."""
    failing = [n for n, d in verdict.tests.items() if not d.passed]
    if not verdict.log_valid:
        return "; ".join(problems[:5])
    if failing:
        reason = f"{len(failing)} test(s) not passing: " + ", ".join(f"{n} ({verdict.tests[n].status})" for n in failing[:5])
        if unearned:
            reason += ("; an XFAIL, XPASS or skip counts as passing only where the gold patch's validation "
                       "recorded the same status (a FAIL_TO_PASS test must pass)")
        return reason
    if not verdict.swebench_log_resolved:
        return "swebench's grading does not resolve the run"
    return "all FAIL_TO_PASS and PASS_TO_PASS tests pass"


def status_earned(status: str, expected: str, gold: str | None) -> bool:
    """Whether a status swebench counts as passing is earned: PASSED always; XFAIL, XPASS and SKIPPED
    only where the gold patch had the same status (without a validation record, a skipped or xfailed
    PASS_TO_PASS test is kept as swebench keeps it, and a FAIL_TO_PASS test must really pass)."""
    if status == "PASSED" or status == "MISSING":  # MISSING passes only under fail_only: the log has failures only
        return True
    if gold is not None:
        return status == gold
    return expected == "PASS_TO_PASS"


def _test_region(log: str) -> str:
    if START_TEST_OUTPUT in log:
        return log.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]
    return log


def _outcomes(report: dict | None) -> dict[str, str]:
    tests = (report or {}).get("tests") if isinstance(report, dict) else None
    return {str(k): str(v) for k, v in tests.items()} if isinstance(tests, dict) else {}


def _worst(statuses: list[str]) -> str:
    return next((s for s in statuses if s in FAILING), statuses[-1])


def _disagreements(tests: dict[str, TestDetail], report: dict | None, groups: dict[str, list[str]]) -> list[str]:
    if not isinstance(report, dict) or not report.get("complete"):
        return ["pytest's own report is missing: the test run was cut short or tampered with"]
    problems = []
    for name, detail in tests.items():
        truth = lookup(name, groups)
        if detail.passed and truth is None:
            problems.append(f"log says {name} passed but pytest never ran it")
        elif detail.passed and not all_passing(truth, skipped_ok=detail.expected == "PASS_TO_PASS"):
            # swebench keeps a skipped PASS_TO_PASS test as maintained; a FAIL_TO_PASS test must really pass
            problems.append(f"log says {name} {detail.status} but pytest recorded {_worst(truth)}")
        elif detail.status in FAILING and truth is not None and all_passing(truth):
            problems.append(f"log says {name} {detail.status} but pytest recorded {truth[0]}")
    return problems


def canary_problems(report: dict | None, canaries: list[dict], listed: frozenset[str] = frozenset()) -> list[str]:
    """What root asked for and the evidence lacks or contradicts: every canary root built must have run
    (each of its parametrisations once), a must-fail copy failing and a must-pass copy passing. A copy that
    never ran while the real test did was removed (deselected, made uncollectable): the run is not the one
    root set up. A parametrisation the real test xfailed or skipped says nothing (its marks, not its body,
    decide), unless it is one of the task's ``listed`` tests (published ids may be cut at a space)."""
    outcomes = _outcomes(report)
    by_function: dict[str, list[tuple[str, str]]] = {}
    for nodeid, status in outcomes.items():
        base, bracket, params = nodeid.partition("[")
        by_function.setdefault(base, []).append((bracket + params, status))
    problems = []
    for entry in canaries:
        original = str(entry.get("test") or "").split("[", 1)[0]
        for kind in ("must_fail", "must_pass"):
            nodeid = str(entry.get(kind) or "")
            runs = by_function.get(nodeid)
            if not runs:
                if original in by_function:  # the real test ran and its copy beside it did not: it was removed
                    problems.append(f"canary {nodeid} (a copy of {entry.get('test')} root wrote into its file) never "
                                    "ran: tests were removed from the run")
                continue  # neither ran (the file does not import): the real test's absence fails the grading
            statuses = [s for params, s in runs if outcomes.get(original + params) not in ("XFAIL", "SKIPPED")
                        or _listed(original + params, listed)]
            if kind == "must_fail" and any(s not in FAILING for s in statuses):
                problems.append(f"canary {nodeid} (a copy of a FAIL_TO_PASS test that must fail) was recorded "
                                f"{_best(statuses)}: test outcomes were forced or test bodies emptied")
            elif kind == "must_pass" and any(s != "PASSED" for s in statuses):
                problems.append(f"canary {nodeid} (an empty copy of a FAIL_TO_PASS test that must pass) was recorded "
                                f"{_worst(statuses)}: test outcomes were forced")
    return problems


def _listed(nodeid: str, listed: frozenset[str]) -> bool:
    return nodeid in listed or any("[" in name and nodeid.startswith(name) for name in listed)


def _best(statuses: list[str]) -> str:
    return next((s for s in statuses if s not in FAILING), statuses[0])


def repeated_runs(report: dict | None, task: Task) -> list[str]:
    """Listed tests pytest ran more than once in one grading: the tests were run again (a re-executed
    pytest) to replace a verdict. A second session alone is no sign (pytest's own tests run sessions inside
    theirs)."""
    runs = (report or {}).get("runs") if isinstance(report, dict) else None
    if not isinstance(runs, dict):
        return []
    listed = {*task.FAIL_TO_PASS, *task.PASS_TO_PASS}
    twice = sorted(n for n, count in runs.items() if isinstance(count, int) and count > 1 and n in listed)
    return [f"test {n} ran {runs[n]} times in one grading: the tests were run again" for n in twice[:3]]


def collection_evidence(report: dict | None, log: str) -> str:
    """Why tests may be missing: pytest's collection errors, else the log's first error lines."""
    errors = (report or {}).get("collect_errors") if isinstance(report, dict) else None
    if isinstance(errors, list) and errors:
        parts = []
        for err in errors[:3]:
            if isinstance(err, dict):
                text = str(err.get("longrepr") or "").strip().splitlines()
                parts.append(f"{err.get('nodeid') or '<session>'}: " + " | ".join(text[-3:]))
            else:
                parts.append(str(err))
        return ("collection errors: " + "; ".join(parts))[:MAX_EVIDENCE_CHARS]
    lines = [ln.strip() for ln in log.splitlines() if ERROR_LINE.search(ln) and not ln.startswith("+ ")]
    if lines:
        return ("first errors in the log: " + " | ".join(lines[:6]))[:MAX_EVIDENCE_CHARS]
    return ""


def added_hooks(hooks: list, workdir: str, agent_files, added_defs: dict[str, list[str]],
                runner: tuple[str, ...] = ()) -> str:
    """Why the run is tampered because pytest registered a hook implementation the patch added ('' when it did
    not): a function that decides what runs or how it is reported, defined by the patch's added lines (or in a
    file the patch changed beyond what the diff showed), is no fix, however pytest came to load it. The
    runner's own packages (``runner``: folders, where the repository is pytest or pluggy) are the runner's: a
    fix to pytest adds hooks to pytest."""
    root = workdir.rstrip("/") + "/"
    changed = set(agent_files)
    found = []
    for hook, path, function in hooks:
        rel = path[len(root):] if path.startswith(root) and not path.startswith(tuple(runner)) else None
        if rel is None or rel not in changed:
            continue
        if rel not in added_defs or function in added_defs[rel]:
            found.append(f"{hook} from {rel}:{function}")
    if not found:
        return ""
    return ("pytest registered a hook implementation the patch adds, which decides what runs or how it is reported: "
            + "; ".join(found[:5]))
