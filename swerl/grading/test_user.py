"""The unprivileged user a grading's tests run as, so that the evidence is out of their reach.

Standard library only, on purpose: copied into every grading sandbox and run there as root
(``python3 -I -S``), like the path guard. Two steps:

* ``lockdown`` (called by the set-up, ``sandbox_setup.py``): give the test user a passwd entry
  and a home, and make every folder of the repository world-writable with the sticky bit
  (``/tmp``'s rule): the tests may create files anywhere, but cannot change, delete or rename a
  file they did not create. Every file of the repository (the tests, the test patch's files,
  pytest's configuration, the agent's code) is root's, and so is ``.git``, the grading folder
  and the evidence channel.
* ``run ROOT UID HOME [--timeout-s S] -- CMD...``: run CMD as UID, no supplementary groups,
  ``no_new_privs`` set (a set-uid program cannot give root back), and wait for it, at most S
  seconds (then every process of UID is killed and a timeout line printed, from root, after
  the audit's); this process stays root's. A
  process of another user cannot signal swerl's runner (or this one), write to its output
  through ``/proc/<pid>/fd``, or read its evidence folder. Then ``finish``: SIGKILL every
  process of UID until none is left, so no daemon the tests started writes after them (the
  evidence is read only after this); then audit what the tests created in the repository that
  changes how tests are collected or how the interpreter starts (``conftest.py``, pytest's
  configuration, start-up hooks, packaging metadata, pytest's bytecode cache, a new module at
  an import root), printed as one JSON line. A file the test user owns was written by the
  tests, whatever its name says. It exits with CMD's status. One interpreter for both: it
  runs in every grading.
"""

from __future__ import annotations

import os
import signal
import sys

# ctypes, fnmatch, importlib and json are imported where used: the set-up's interpreter imports this
# module for ``lockdown``, which needs none of them, and each costs start-up time in every grading

NAME = "swerl-test"
RUNNER = "/opt/swerl/swerl_exec.py"
PR_SET_NO_NEW_PRIVS = 38
AUDIT_LINE = "@@swerl-audit "
TIMEOUT_LINE = "@@swerl-timed-out "
PLANTED_NAMES = ("conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg",
                 "pyproject.toml", "entry_points.txt")
MODULE_SUFFIXES = (".py", ".pyc", ".so")
PLANTED_GLOBS = ("*.pth", "*-pytest-*.pyc", "sitecustomize*", "usercustomize*", "*.egg-info", "*.dist-info", "*.egg-link")


def _ensure_account(uid: int, home: str) -> None:
    """A passwd and group entry for ``uid`` (tools such as ``getpass`` and ``git`` look the user up)."""
    for path, line in (("/etc/passwd", f"{NAME}:x:{uid}:{uid}::{home}:/bin/sh\n"), ("/etc/group", f"{NAME}:x:{uid}:\n")):
        try:
            with open(path) as f:
                if any(entry.split(":")[2:3] == [str(uid)] for entry in f):
                    continue
        except FileNotFoundError:
            pass
        with open(path, "a") as f:
            f.write(line)


def lockdown(root: str, uid: int | None, home: str, evidence: str) -> None:
    """The evidence folder and its pipe; with a ``uid``, that user's account and the repository's folders."""
    os.makedirs(evidence, mode=0o700, exist_ok=True)
    os.chmod(evidence, 0o700)
    os.mkfifo(os.path.join(evidence, "channel"), 0o600)
    if uid is None:
        return
    _ensure_account(uid, home)
    os.makedirs(home, exist_ok=True)
    # the repository belongs to root: git would refuse it to another user without this
    with open(os.path.join(home, ".gitconfig"), "w") as f:
        f.write("[safe]\n\tdirectory = *\n")
    for path in (home, os.path.join(home, ".gitconfig")):
        os.chown(path, uid, uid)
    for dirpath, dirnames, _ in os.walk(root):
        if dirpath == root and ".git" in dirnames:
            dirnames.remove(".git")
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        os.chmod(dirpath, 0o1777)


def drop_to(uid: int) -> None:
    """Become ``uid`` for good (real, effective and saved ids), unable to regain privileges."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    except (OSError, AttributeError):  # the container runs with no-new-privileges anyway
        pass
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


class _TimedOut(Exception):
    pass


def _time_out(signum, frame):
    raise _TimedOut


def run(root: str, uid: int, home: str, argv: list[str], timeout_s: float | None = None) -> int:
    """Run ``argv`` as ``uid`` and wait for it, then ``finish``; its status as a shell gives it (128 + N for
    signal N). This process stays root's, out of the tests' reach. With ``timeout_s``: once that many
    seconds have passed, every process of ``uid`` is killed (the command too) and ``TIMEOUT_LINE`` is
    printed just after the audit's line, where no line of the tests' can come."""
    pid = os.fork()
    if pid == 0:
        try:
            if os.getuid() == 0:  # an image that already runs as another user keeps it: there is nothing to drop
                drop_to(uid)
                os.environ.update(HOME=home, USER=NAME, LOGNAME=NAME)
            os.execvp(argv[0], argv)
        except BaseException as e:  # the child never goes on as this process: it could still be root
            print(f"cannot run {argv[0]!r} as user {uid}: {e}", file=sys.stderr, flush=True)
        os._exit(127)
    timed_out = False
    try:
        if timeout_s is not None:  # the parent's timer (a child inherits none): armed inside the try, so it cannot strike outside
            signal.signal(signal.SIGALRM, _time_out)
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
        status = os.waitpid(pid, 0)[1]
        if timeout_s is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)  # one-shot: once disarmed (or fired) it never fires again
    except _TimedOut:
        timed_out = True
        _kill(pid)  # the command itself, also where it runs as this process's own user (nothing was dropped)
        killall(uid)
        try:
            status = os.waitpid(pid, 0)[1]
        except ChildProcessError:  # it ended as the limit struck, and was already reaped
            status = 9
    finish(root, uid)
    if timed_out:  # after the audit's line, where no process of the tests' is left to print
        print(f"{TIMEOUT_LINE}{timeout_s:g}", flush=True)
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def finish(root: str, uid: int) -> None:
    """Once the tests' command is over: no process of theirs is left, then the audit's line is printed."""
    import json

    killall(uid)
    print(AUDIT_LINE + json.dumps(audit(root, uid), sort_keys=True), flush=True)


def _live_processes(uid: int) -> list[int]:
    """Processes of ``uid`` that are not yet zombies (a zombie is dead: it only waits for its parent)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            owner = os.stat(f"/proc/{name}").st_uid
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if owner == uid and state not in (b"Z", b"X"):
            pids.append(int(name))
    return pids


def killall(uid: int) -> None:
    """SIGKILL every live process of ``uid`` until none is left (root may signal any), with the runner's own loop."""
    if _live_processes(uid):  # none alive (the usual end): only a process of theirs could start one, so no loop
        _runner().kill_until_none(lambda: _live_processes(uid))


def _runner():
    """swerl's in-container runner (``swerl.envs.docker_sandbox.RUNNER``), present in every grading sandbox."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("swerl_exec", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def planted_reason(path: str) -> str | None:
    """Why a file the tests created at ``path`` (relative) is evidence of tampering, or None."""
    import fnmatch

    parts = path.split("/")
    name = parts[-1]
    if name in PLANTED_NAMES:
        return "configures the test runner"
    for part in parts:
        if any(fnmatch.fnmatch(part, g) for g in PLANTED_GLOBS):
            return "a start-up hook, packaging metadata or pytest's bytecode cache"
    # at an import root (the repository or src/), a new module answers imports a re-run Python makes
    # at start-up under an innocent name (Debian's sitecustomize imports one)
    rest = parts[1:] if parts[0] == "src" and len(parts) > 1 else parts
    if (len(rest) == 1 and name.endswith(MODULE_SUFFIXES)) or (len(rest) == 2 and name == "__init__.py"):
        return "a new module at an import root"
    return None


def audit(root: str, uid: int) -> dict[str, str]:
    planted = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root and ".git" in dirnames:
            dirnames.remove(".git")
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if st.st_uid != uid:
                continue
            rel = os.path.relpath(full, root)
            reason = planted_reason(rel)
            if reason:
                planted[rel] = reason
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return planted


def main(argv: list[str]) -> int:
    cmd = argv[1]
    if cmd == "run":  # run ROOT UID HOME [--timeout-s S] -- CMD...
        sep = argv.index("--")
        options = argv[5:sep]
        timeout_s = float(options[options.index("--timeout-s") + 1]) if "--timeout-s" in options else None
        return run(argv[2], int(argv[3]), argv[4], argv[sep + 1:], timeout_s)
    if cmd == "lockdown":
        import json

        args = json.loads(argv[2])
        lockdown(args["root"], args["uid"], args["home"], args["evidence"])
    else:
        print(f"unknown command {cmd!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
