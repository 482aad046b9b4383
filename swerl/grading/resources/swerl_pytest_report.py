"""pytest plugin run by the grader: a second, structured account of every test's outcome.

Grading compares it with the parsed log; a log line printed by the code under test
("PASSED tests/...") cannot change this report, so forged output is caught.

Each outcome is sent as it happens, one JSON line, down a pipe (file descriptor
SWERL_REPORT_FD) read by a process of root's: the tests run as another user, so they can
add lines to the pipe but never take one back, and grading keeps the worst outcome each
test was ever given and counts how often each test ran. Evidence forged after the fact (at
exit, by a re-run) cannot undo a failure already sent. The descriptor leaves the environment
as this module is imported, before any code under test runs, and the hooks hold what they use
in closures bound then: replacing a name in this module's namespace changes nothing they do.

The canaries are not this plugin's: root writes them into the test files before pytest starts
(``swerl.grading.canaries``), so nothing here tells them apart.
"""

import os

MAX_LINE = 3800  # below PIPE_BUF (4096): each line reaches the reader whole


def _make_hooks():
    import json

    fd = os.environ.pop("SWERL_REPORT_FD", None)
    try:
        fd = int(fd) if fd is not None else None
        if fd is not None:
            os.set_inheritable(fd, False)  # a subprocess or a re-executed pytest does not get it
    except (ValueError, OSError):
        fd = None
    dumps, write = json.dumps, os.write

    def send(event):
        if fd is None:
            return
        line = dumps(event)
        if len(line) > MAX_LINE and "longrepr" in event:
            event = dict(event, longrepr=event["longrepr"][-(MAX_LINE // 2):])
            line = dumps(event)
        try:
            write(fd, (line + "\n").encode())
        except OSError:
            pass

    statuses = {"passed": "PASSED", "failed": "FAILED", "skipped": "SKIPPED"}

    def pytest_runtest_logreport(report):
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                status = "XFAIL" if report.skipped else "FAILED"
            else:
                status = statuses[report.outcome]
            send({"event": "test", "id": report.nodeid, "status": status, "phase": "call"})
        elif report.failed:
            send({"event": "test", "id": report.nodeid, "status": "ERROR", "phase": report.when})
        elif report.skipped and report.when == "setup":
            send({"event": "test", "id": report.nodeid, "status": "SKIPPED", "phase": "setup"})

    def pytest_collectreport(report):
        if report.failed:
            # the traceback's tail says why tests are missing (an ImportError, a syntax error)
            text = str(getattr(report, "longreprtext", "") or report.longrepr or "")
            send({"event": "collect_error", "nodeid": report.nodeid, "longrepr": text[-2000:]})

    def pytest_sessionfinish(session, exitstatus):
        send({"event": "finish", "exitstatus": int(exitstatus)})

    return pytest_runtest_logreport, pytest_collectreport, pytest_sessionfinish


pytest_runtest_logreport, pytest_collectreport, pytest_sessionfinish = _make_hooks()
del _make_hooks
