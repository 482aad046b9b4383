"""pytest plugin run by the grader: a second, structured account of every test's outcome, and canaries.

Grading compares it with the parsed log; a log line printed by the code under test
("PASSED tests/...") cannot change this report, so forged output is caught. Written
to the path in SWERL_REPORT_PATH at the end of the session.

Canaries (SWERL_CANARY_TARGETS: a JSON list of the FAIL_TO_PASS tests' function names and a
suffix): for each collected test of that name (two parametrisations at most), two copies named like it (the real name plus
a random suffix, same parameters and fixtures): one runs the real test and then fails, so it
fails with a real fix and without one; the other does nothing and passes. Code that forces
outcomes (a hook, a patched runner, a test that detects pytest and calls xfail) flips the
copies too, and grading calls the run tampered.
"""

import functools
import json
import os

_outcomes = {}
_collect_errors = []


def _merge(nodeid, status):
    rank = {"PASSED": 0, "XFAIL": 0, "SKIPPED": 1, "FAILED": 2, "ERROR": 3}
    old = _outcomes.get(nodeid)
    if old is None or rank[status] > rank[old]:
        _outcomes[nodeid] = status


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


_canaries = {"must_fail": [], "must_pass": []}
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


def pytest_collection_modifyitems(session, config, items):
    spec = os.environ.get("SWERL_CANARY_TARGETS")
    if not spec:
        return
    import pytest

    wanted = json.loads(spec)
    names, suffix = set(wanted["names"]), wanted["suffix"]
    added, per_name = [], {}
    for item in list(items):
        if type(item) is not pytest.Function or getattr(item, "originalname", None) not in names:
            continue
        # two parametrisations a name are enough to catch a payload (it cannot tell them apart), and cheap
        per_name[item.originalname] = per_name.get(item.originalname, 0) + 1
        if per_name[item.originalname] > MAX_COPIES_PER_NAME:
            continue
        callspec = getattr(item, "callspec", None)
        for kind, wrap, tail in (("must_fail", _must_fail, suffix), ("must_pass", _must_pass, suffix[::-1])):
            base = item.originalname + "_" + tail
            name = base + (f"[{callspec.id}]" if callspec is not None else "")
            try:
                copy = pytest.Function.from_parent(item.parent, name=name, callspec=callspec, callobj=wrap(item.obj),
                                                   fixtureinfo=item._fixtureinfo, originalname=base,
                                                   keywords=dict(item.keywords))
            except Exception:  # an unusual item (a plugin's own kind): no copy, grading then judges without it
                continue
            _canaries[kind].append(copy.nodeid)
            added.append(copy)
    items.extend(added)


def pytest_collectreport(report):
    if report.failed:
        # the traceback's tail says why tests are missing (an ImportError, a syntax error)
        text = str(getattr(report, "longreprtext", "") or report.longrepr or "")
        _collect_errors.append({"nodeid": report.nodeid, "longrepr": text[-2000:]})


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("SWERL_REPORT_PATH")
    if not path:
        return
    with open(path, "w") as f:
        json.dump({"complete": True, "exitstatus": int(exitstatus), "tests": _outcomes,
                   "collect_errors": _collect_errors, "canaries": _canaries}, f)
