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

from pydantic import BaseModel

REPORT_STATUSES = frozenset({"PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"})
_RANK = {"PASSED": 0, "XFAIL": 0, "SKIPPED": 1, "FAILED": 2, "ERROR": 3}


class MalformedReport(ValueError):
    """The evidence exists but is not what the plugin writes: evidence of tampering."""


def report_from_events(raw: bytes) -> dict | None:
    """``{complete, exitstatus, tests, runs, collect_errors, hooks}`` from the event lines; None when pytest sent
    nothing (it never started, or never loaded the plugin). ``runs`` counts each test's call phases."""
    try:
        return _report_from_events(raw)
    except MalformedReport:
        raise
    except Exception as e:  # whatever the lines hold, reading them ends here: never an error of swerl's
        raise MalformedReport(f"unreadable events ({type(e).__name__})") from None


def _report_from_events(raw: bytes) -> dict | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedReport("not UTF-8") from None
    if text and not text.endswith("\n"):
        raise MalformedReport("the last event was cut off (the plugin writes whole lines)")
    tests: dict[str, str] = {}
    runs: dict[str, int] = {}
    errors: list[dict] = []
    finishes: list[int] = []
    hooks: list[list[str]] = []
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
            if event["phase"] == "call":
                runs[event["id"]] = runs.get(event["id"], 0) + 1
        elif kind == "collect_error":
            errors.append({"nodeid": event["nodeid"], "longrepr": event["longrepr"]})
        elif kind == "hooks":
            for impl in event["impls"]:
                if type(impl) is not list or len(impl) != 3 or any(type(x) is not str for x in impl):
                    raise MalformedReport(f"event {number}: a hook implementation is not [hook, file, function]")
                hooks.append(impl)
        else:
            finishes.append(event["exitstatus"])
    # several sessions (or a forged finish): any unclean one makes the run unclean
    exitstatus = next((code for code in finishes if code != 0), 0)
    return {"complete": bool(finishes), "exitstatus": exitstatus, "tests": tests, "runs": runs,
            "sessions": len(finishes), "collect_errors": errors, "hooks": hooks}


_SCHEMA = {
    "test": {"id": str, "status": str, "phase": str},
    "collect_error": {"nodeid": str, "longrepr": str},
    "finish": {"exitstatus": int},
    "hooks": {"impls": list},
}
PHASES = frozenset({"setup", "call", "teardown"})


def _event(line: str, number: int) -> dict:
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):
        raise MalformedReport(f"event {number} is not JSON") from None
    kind = event.get("event") if isinstance(event, dict) else None
    fields = _SCHEMA.get(kind) if type(kind) is str else None
    if fields is None or set(event) != {"event", *fields}:
        raise MalformedReport(f"event {number} is not one the plugin sends")
    for name, kind in fields.items():
        if type(event[name]) is not kind:
            raise MalformedReport(f"event {number}: {name!r} is not a {kind.__name__}")
    if event["event"] == "test" and (event["status"] not in REPORT_STATUSES or event["phase"] not in PHASES):
        raise MalformedReport(f"event {number}: {event['status']!r} in {event['phase']!r} is not a pytest outcome")
    return event


class RootAnswer(BaseModel):
    """What root left in its folder, as its one framed line carried it (``plan.root_answer_lines``)."""

    setup: dict | None = None  # {"stage", "code", "via"}: the set-up's last step and its status
    guard: dict | None = None  # the path guard's verdict (restored, removed, refused, changed), bounded
    canaries: dict | None = None  # {"built": [...], "not_built": {...}} (swerl.grading.canaries)
    pre_tests: dict | None = None  # {"python", "tripwire", ...}: what root installed before the tests
    finish: dict | None = None  # {"timed_out", "status", "audit", "tripwire"} (test_user.finish)
    setup_log: str = ""
    events: bytes | None = None  # pytest's events when small enough to carry (else None: read the file)


_MEMBERS = {"setup.json": "setup", "guard.json": "guard", "canaries.json": "canaries", "pre_tests.json": "pre_tests",
            "finish.json": "finish"}


def root_answer(output: str, prefix: str) -> tuple[RootAnswer | None, str]:
    """Root's answer from the command's output and the output before it; (None, output) when there is none.
    Only root could read the secret in ``prefix``, and it prints its answer once no process of the tests'
    is left, so no other line can carry it. Root's own files: one that does not read is swerl's problem
    (``ValueError``), never the tests'."""
    import io
    import tarfile

    at = output.rfind("\n" + prefix)
    if at < 0:
        return None, output
    line = output[at + 1:].split("\n", 1)[0][len(prefix):]
    fields: dict = {}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(line.strip(), validate=True))) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else b""
            if member.name in _MEMBERS:
                fields[_MEMBERS[member.name]] = json.loads(data)
            elif member.name == "setup.tail":
                fields["setup_log"] = data.decode("utf-8", "replace")
            elif member.name == "events":
                fields["events"] = data
    return RootAnswer.model_validate(fields), output[:at]


def tripwire_records(text: str) -> tuple[list[str], int]:
    """(records of tampering, how many interpreters reported in) from the tripwire's lines: each line is
    ``pid<TAB>event<TAB>file<TAB>detail``; a ``hello`` says an interpreter started with the hook in. Any
    other line, and any line that does not read, is a record: only the hook and the tests write there."""
    records, hellos = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) == 4 and fields[1] == "hello" and fields[0].isdigit():
            hellos += 1
            continue
        records.append(" ".join(fields[1:]) if len(fields) == 4 else line[:300])
    return records, hellos
