"""pytest's own account of a graded run, rebuilt from the events swerl's plugin sent down its pipe.

The plugin (``resources/swerl_pytest_report.py``) writes one JSON line per event as it happens;
a process of root's copies the pipe to a file the tests cannot open. This module turns those
lines into the report the judge reads. Lines only accumulate, so each test keeps the WORST
outcome it was ever given: a line forged after the fact cannot turn a failure into a pass.
Anything that is not an event the plugin writes is evidence of tampering (``MalformedReport``),
never an exception that takes the host down.
"""

from __future__ import annotations

import base64
import json

from swerl.grading.path_rules import GUARD_LINE
from swerl.grading.test_user import AUDIT_LINE, TIMEOUT_LINE

REPORT_STATUSES = frozenset({"PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"})
CANARY_KINDS = ("must_fail", "must_pass")
_RANK = {"PASSED": 0, "XFAIL": 0, "SKIPPED": 1, "FAILED": 2, "ERROR": 3}


class MalformedReport(ValueError):
    """The evidence exists but is not what the plugin writes: evidence of tampering."""


def report_from_events(raw: bytes) -> dict | None:
    """``{complete, exitstatus, tests, canaries, collect_errors}`` from the event lines; None when
    pytest sent nothing (it never started, or never loaded the plugin)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedReport("not UTF-8") from None
    if text and not text.endswith("\n"):
        raise MalformedReport("the last event was cut off (the plugin writes whole lines)")
    tests: dict[str, str] = {}
    canaries: dict[str, list[str]] = {kind: [] for kind in CANARY_KINDS}
    errors: list[dict] = []
    finishes: list[int] = []
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return None
    for number, line in enumerate(lines, 1):
        event = _event(line, number)
        kind = event["event"]
        if kind == "test":
            old = tests.get(event["id"])
            if old is None or _RANK[event["status"]] > _RANK[old]:
                tests[event["id"]] = event["status"]
        elif kind == "canary":
            canaries[event["kind"]].append(event["id"])
        elif kind == "collect_error":
            errors.append({"nodeid": event["nodeid"], "longrepr": event["longrepr"]})
        else:
            finishes.append(event["exitstatus"])
    # several sessions (or a forged finish): any unclean one makes the run unclean
    exitstatus = next((code for code in finishes if code != 0), 0)
    return {"complete": bool(finishes), "exitstatus": exitstatus, "tests": tests, "canaries": canaries,
            "collect_errors": errors}


_SCHEMA = {
    "test": {"id": str, "status": str},
    "canary": {"kind": str, "id": str},
    "collect_error": {"nodeid": str, "longrepr": str},
    "finish": {"exitstatus": int},
}


def _event(line: str, number: int) -> dict:
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):
        raise MalformedReport(f"event {number} is not JSON") from None
    fields = _SCHEMA.get(event.get("event")) if isinstance(event, dict) else None
    if fields is None or set(event) != {"event", *fields}:
        raise MalformedReport(f"event {number} is not one the plugin sends")
    for name, kind in fields.items():
        if type(event[name]) is not kind:
            raise MalformedReport(f"event {number}: {name!r} is not a {kind.__name__}")
    if event["event"] == "test" and event["status"] not in REPORT_STATUSES:
        raise MalformedReport(f"event {number}: {event['status']!r} is not a pytest outcome")
    if event["event"] == "canary" and event["kind"] not in CANARY_KINDS:
        raise MalformedReport(f"event {number}: {event['kind']!r} is not a kind of canary")
    return event


def report_from_b64(b64: str) -> dict | None:
    """pytest's report from the events the grading command printed (base64 of the evidence file)."""
    try:
        raw = base64.b64decode(b64.strip(), validate=True)
    except ValueError:
        raise MalformedReport("not base64") from None
    return report_from_events(raw)


def guard_verdict(setup_log: str) -> dict | None:
    """The guard's JSON line from the set-up output (swerl's own output: no code under test has run yet)."""
    for line in reversed(setup_log.splitlines()):
        if line.startswith(GUARD_LINE):
            try:
                verdict = json.loads(line[len(GUARD_LINE):])
            except ValueError:
                return None
            return verdict if isinstance(verdict, dict) and all(isinstance(verdict.get(k), dict)
                                                                 for k in ("restored", "removed", "refused")) else None
    return None


def timed_out_verdict(text: str) -> bool:
    """Whether the test user's helper killed the tests at their time limit: its timeout line is the one
    just after the audit's last line, both printed by root once no process of the tests' is left (any
    line the tests printed, a forged audit or timeout line too, comes before them)."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(AUDIT_LINE):
            return i + 1 < len(lines) and lines[i + 1].startswith(TIMEOUT_LINE)
    return False


def audit_verdict(text: str) -> dict[str, str]:
    """What the tests planted, from the audit's line: the last one, printed by root once no process of the
    tests' is left (a line the tests printed comes before it)."""
    for line in reversed(text.splitlines()):
        if line.startswith(AUDIT_LINE):
            try:
                planted = json.loads(line[len(AUDIT_LINE):])
            except ValueError:
                break
            if isinstance(planted, dict):
                return {str(k): str(v) for k, v in planted.items()}
            break
    raise MalformedReport("the audit of what the tests created did not answer")
