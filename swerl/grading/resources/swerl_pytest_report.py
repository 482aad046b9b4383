"""pytest plugin run by the grader: a second, structured account of every test's outcome, and canaries.

Grading compares it with the parsed log; a log line printed by the code under test
("PASSED tests/...") cannot change this report, so forged output is caught.

Each outcome is sent as it happens, one JSON line, down a pipe (file descriptor
SWERL_REPORT_FD) read by a process of root's: the tests run as another user, so they can
add lines to the pipe but never take one back, and grading keeps the worst outcome each
test was ever given. Evidence forged after the fact (at exit, by a re-run) cannot undo a
failure already sent. Both settings leave the environment as this module is imported,
before any code under test runs.

Canaries (SWERL_CANARY_TARGETS: a JSON list of the FAIL_TO_PASS tests' function names and a
suffix): for each collected test of that name (a pytest function, two parametrisations at most,
or a ``unittest.TestCase`` method), two copies named like it (the real name plus a random
suffix, same parameters and fixtures, or a new method of the same class): one runs the real test and then fails, so it
fails with a real fix and without one; the other does nothing and passes. Code that forces
outcomes (a hook, a patched runner, a test that detects pytest and calls xfail) flips the
copies too, and grading calls the run tampered.
"""

import functools
import json
import os

MAX_LINE = 3800  # below PIPE_BUF (4096): each line reaches the reader whole


def _channel():
    fd = os.environ.pop("SWERL_REPORT_FD", None)
    if fd is None:
        return None
    try:
        fd = int(fd)
        os.set_inheritable(fd, False)  # a subprocess or a re-executed pytest does not get it
    except (ValueError, OSError):
        return None
    return fd


_FD = _channel()
_CANARY_SPEC = os.environ.pop("SWERL_CANARY_TARGETS", None)


def _send(event):
    if _FD is None:
        return
    line = json.dumps(event)
    if len(line) > MAX_LINE and "longrepr" in event:
        event = dict(event, longrepr=event["longrepr"][-(MAX_LINE // 2):])
        line = json.dumps(event)
    try:
        os.write(_FD, (line + "\n").encode())
    except OSError:
        pass


def _merge(nodeid, status):
    _send({"event": "test", "id": nodeid, "status": status})


def pytest_runtest_logreport(report):
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            _merge(report.nodeid, "XFAIL" if report.skipped else "FAILED")
        else:
            _merge(report.nodeid, {"passed": "PASSED", "failed": "FAILED", "skipped": "SKIPPED"}[report.outcome])
    elif report.failed:
        _merge(report.nodeid, "ERROR")
    elif report.skipped and report.when == "setup":
        _merge(report.nodeid, "SKIPPED")


MAX_COPIES_PER_NAME = 2


def _must_fail(fn):
    @functools.wraps(fn)  # keeps the signature: pytest resolves the same fixtures and parameters
    def canary(*args, **kwargs):
        import pytest

        fn(*args, **kwargs)
        pytest.fail("this copy of the test must fail", pytrace=False)  # no traceback to format: it costs time
    return canary


def _must_pass(fn):
    @functools.wraps(fn)
    def canary(*args, **kwargs):
        return None
    return canary


def _function_copy(item, kind, tail):
    import pytest

    callspec = getattr(item, "callspec", None)
    base = item.originalname + "_" + tail
    name = base + (f"[{callspec.id}]" if callspec is not None else "")
    wrap = _must_fail if kind == "must_fail" else _must_pass
    return pytest.Function.from_parent(item.parent, name=name, callspec=callspec, callobj=wrap(item.obj),
                                       fixtureinfo=item._fixtureinfo, originalname=base, keywords=dict(item.keywords))


def _unittest_copy(item, kind, tail):
    """A ``unittest.TestCase`` method is looked up on its class by name: the copy is a new method there."""
    cls, name = item.parent.obj, item.name + "_" + tail
    method = getattr(cls, item.name)
    if kind == "must_fail":
        def canary(self):
            method(self)
            self.fail("this copy of the test must fail")
    else:
        def canary(self):
            return None
    canary.__name__ = canary.__qualname__ = name
    setattr(cls, name, canary)
    return type(item).from_parent(item.parent, name=name)


def _copier(item):
    import pytest

    if type(item) is pytest.Function:
        return _function_copy
    if type(item).__name__ == "TestCaseFunction" and type(item).__module__ == "_pytest.unittest":
        return _unittest_copy
    return None  # an unusual item (a plugin's own kind): no copy, grading then judges without it


def pytest_collection_modifyitems(session, config, items):
    if not _CANARY_SPEC:
        return
    wanted = json.loads(_CANARY_SPEC)
    names, suffix = set(wanted["names"]), wanted["suffix"]
    added, per_name = [], {}
    for item in list(items):
        copier = _copier(item)
        if copier is None or getattr(item, "originalname", None) not in names:
            continue
        # two parametrisations a name are enough to catch a payload (it cannot tell them apart), and cheap
        per_name[item.originalname] = per_name.get(item.originalname, 0) + 1
        if per_name[item.originalname] > MAX_COPIES_PER_NAME:
            continue
        for kind, tail in (("must_fail", suffix), ("must_pass", suffix[::-1])):
            try:
                copy = copier(item, kind, tail)
            except Exception:
                continue
            _send({"event": "canary", "kind": kind, "id": copy.nodeid})
            added.append(copy)
    items.extend(added)


def pytest_collectreport(report):
    if report.failed:
        # the traceback's tail says why tests are missing (an ImportError, a syntax error)
        text = str(getattr(report, "longreprtext", "") or report.longrepr or "")
        _send({"event": "collect_error", "nodeid": report.nodeid, "longrepr": text[-2000:]})


def pytest_sessionfinish(session, exitstatus):
    _send({"event": "finish", "exitstatus": int(exitstatus)})
