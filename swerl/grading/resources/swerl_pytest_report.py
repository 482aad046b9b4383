"""pytest plugin run by the grader: a second, structured account of every test's outcome.

Grading compares it with the parsed log; a log line printed by the code under test
("PASSED tests/...") cannot change this report, so forged output is caught.

Each outcome is sent as it happens, one JSON line, down a pipe (file descriptor
SWERL_REPORT_FD) read by a process of root's: the tests run as another user, so they can
add lines to the pipe but never take one back, and grading keeps the worst outcome each
test was ever given and counts how often each test ran. Evidence forged after the fact (at
exit, by a re-run) cannot undo a failure already sent. The descriptor leaves the environment
as this module is imported, before any code under test runs, and the hooks hold what they use
in closures bound then, the builtins they call included: replacing a name in this module's
namespace, or in ``builtins``, changes nothing they do.

At the end of collection it lists which files and functions implement the hooks that choose, run or
report tests (outside the environment's own plugins): the host refuses a run where one of them is a
function the patch added, however pytest came to register it (a star import into a conftest, a
``pytest_plugins`` entry naming library code).

The canaries are not this plugin's: root writes them into the test files before pytest starts
(``swerl.grading.canaries``), so nothing here tells them apart.
"""

import os

MAX_LINE = 3800  # below PIPE_BUF (4096): each line reaches the reader whole


# Builtins are parameters of the factories below, their defaults bound as this module is imported: code under test
# can replace `builtins.len` without a trace, and a closure that looked it up when called would use the fake.


def _make_dumps(type=type, str=str, bool=bool, int=int, list=list, tuple=tuple, dict=dict, ord=ord):
    """``dumps(value)``: JSON text (ASCII) of str, int, bool, None, list, tuple and dict values, written here: the
    ``json`` module's encoder is module state code under test may replace (``json._default_encoder``)."""
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}

    def text(value):
        out = []
        for c in value:
            escaped = escapes.get(c)
            if escaped is None:
                code = ord(c)
                if 0x20 <= code < 0x7f:
                    escaped = c
                elif code < 0x10000:
                    escaped = "\\u%04x" % code
                else:  # a surrogate pair, as JSON writes characters past the BMP
                    code -= 0x10000
                    escaped = "\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))
            out.append(escaped)
        return '"' + "".join(out) + '"'

    def dumps(value):
        kind = type(value)
        if kind is bool:
            return "true" if value else "false"
        if kind is int:
            return "%d" % value
        if value is None:
            return "null"
        if kind is list or kind is tuple:
            return "[" + ", ".join([dumps(item) for item in value]) + "]"
        if kind is dict:
            return "{" + ", ".join([text(str(key)) + ": " + dumps(item) for key, item in value.items()]) + "}"
        return text(str(value))

    return dumps


def _make_sender(dumps, max_line=MAX_LINE, len=len, dict=dict, OSError=OSError):
    """``send(event)``: one JSON line down the descriptor SWERL_REPORT_FD, taken out of the environment now; a
    no-op where there is none."""
    fd = os.environ.pop("SWERL_REPORT_FD", None)
    try:
        fd = int(fd) if fd is not None else None
        if fd is not None:
            os.set_inheritable(fd, False)  # a subprocess or a re-executed pytest does not get it
    except (ValueError, OSError):
        fd = None
    write = os.write

    def send(event):
        if fd is None:
            return
        line = dumps(event)
        if len(line) > max_line and "longrepr" in event:
            event = dict(event, longrepr=event["longrepr"][-(max_line // 2):])
            line = dumps(event)
        try:
            write(fd, (line + "\n").encode())
        except OSError:
            pass

    return send


def _make_hooks(send, outcome_hooks, this_file, hasattr=hasattr, getattr=getattr, str=str, int=int, len=len, range=range,
                repr=repr):
    """The plugin's four hooks; ``outcome_hooks`` the hooks whose implementations are listed, ``this_file`` the
    plugin's own path (its hooks are not listed)."""
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

    import sys

    installed = tuple({p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if p})

    def pytest_collection_finish(session):
        # every implementation of a hook that decides what runs and how it is reported, by the file and the
        # function it was defined as (the host judges which of them the patch added); the environment's own
        # plugins are left out, and the lines stay below PIPE_BUF
        hook, impls = session.config.pluginmanager.hook, []
        for name in outcome_hooks:
            caller = getattr(hook, name, None)
            for impl in (caller.get_hookimpls() if caller is not None else ()):
                code = getattr(impl.function, "__code__", None)
                where = code.co_filename if code is not None else str(getattr(impl.function, "__module__", ""))
                if where.startswith(installed) or where == this_file:
                    continue
                impls.append([name, where[-300:], code.co_name if code is not None else repr(impl.function)[:80]])
        for start in range(0, len(impls), 8):
            send({"event": "hooks", "impls": impls[start:start + 8]})

    return pytest_runtest_logreport, pytest_collectreport, pytest_sessionfinish, pytest_collection_finish


# hooks whose implementations choose, run or report the tests: one the patch adds can force an outcome
OUTCOME_HOOKS = (
    "pytest_runtest_protocol", "pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown",
    "pytest_runtest_makereport", "pytest_runtest_logreport", "pytest_report_teststatus", "pytest_pyfunc_call",
    "pytest_collection", "pytest_collection_modifyitems", "pytest_deselected", "pytest_collect_file",
    "pytest_pycollect_makeitem", "pytest_pycollect_makemodule", "pytest_make_collect_report", "pytest_collectreport",
    "pytest_itemcollected", "pytest_ignore_collect", "pytest_runtestloop", "pytest_fixture_setup",
    "pytest_sessionfinish",
)
pytest_runtest_logreport, pytest_collectreport, pytest_sessionfinish, pytest_collection_finish = \
    _make_hooks(_make_sender(_make_dumps()), OUTCOME_HOOKS, __file__)
del _make_hooks, _make_sender, _make_dumps
