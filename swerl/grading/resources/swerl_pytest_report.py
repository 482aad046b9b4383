"""pytest plugin run by the grader: a second, structured account of every test's outcome.

Grading compares it with the parsed log; a log line printed by the code under test
("PASSED tests/...") cannot change this report, so forged output is caught. Written
to the path in SWERL_REPORT_PATH at the end of the session.
"""

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
                   "collect_errors": _collect_errors}, f)
