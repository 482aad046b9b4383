"""The unprivileged user a grading's tests run as, so that the evidence is out of their reach.

Standard library only, on purpose: copied into every grading sandbox and run there as root
(``python3 -I -S``), like the path guard. Two steps:

* ``lockdown`` (called by the set-up, ``sandbox_setup.py``): give the test user a passwd entry
  and a home, and make every folder of the repository world-writable with the sticky bit
  (``/tmp``'s rule): the tests may create files anywhere, but cannot change, delete or rename a
  file they did not create. Every file of the repository (the tests, the test patch's files,
  pytest's configuration, the agent's code) is root's, and so is ``.git``, the grading folder
  and the evidence channel.
* ``run ROOT UID HOME [--timeout-s S] [--evidence DIR] [--wire FIFO] -- CMD...``: run CMD as UID,
  no supplementary groups, ``no_new_privs`` set (a set-uid program cannot give root back), and
  wait for it, at most S seconds (then every process of UID is killed); this process stays
  root's. A process of another user cannot signal swerl's runner (or this one), write to its
  output through ``/proc/<pid>/fd``, or read its evidence folder. Then ``finish``: every process
  of UID killed until no thread of theirs is alive, so nothing the tests started writes after
  them; then an audit of what they created that changes how tests are collected or how an
  interpreter starts (in the repository, their home, ``/tmp``, ``/var/tmp``, ``/dev/shm``), and
  the tripwire's records read from its FIFO, all written with the timeout to DIR/finish.json,
  which only root opens (with no DIR, the audit's line is printed). A file the test user owns was written by the tests, whatever its name
  says. It exits with CMD's status. With ``--clear-outside 1`` (a set-up command run as the test user,
  ``setup_privilege``), what the user left in its home and the temporary folders is then removed.
"""

from __future__ import annotations

import os
import signal
import sys

# ctypes, fcntl and json are imported where used: the set-up's interpreter imports this
# module for ``lockdown``, which needs none of them, and each costs start-up time in every grading

NAME = "swerl-test"
TRIPWIRE_CONFIG = "/tmp/swerl-grade/tripwire.conf"  # resources/swerl_tripwire.py reads it (CONFIG there)
PR_SET_NO_NEW_PRIVS = 38
OUTSIDE = ("/tmp", "/var/tmp", "/dev/shm")  # with the test user's home: every place the tests can write outside the repository
AUDIT_LINE = "@@swerl-audit "  # finish's printed line, where run is given no evidence folder
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


def lockdown(root: str, uid: int | None, home: str, evidence: str, wire: str | None = None,
             agent_files: list[str] = ()) -> None:
    """The evidence folder and its pipe; with a ``uid``, that user's account, the repository's folders, and
    the tripwire's FIFO (anyone may write it, only root reads it) and settings (its path, then the
    absolute path of every file the patch changed or created)."""
    os.makedirs(evidence, mode=0o700, exist_ok=True)
    os.chmod(evidence, 0o700)
    os.mkfifo(os.path.join(evidence, "channel"), 0o600)
    if uid is None:
        return
    if wire is not None:
        folder = os.path.dirname(TRIPWIRE_CONFIG)
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, 0o755)
        os.mkfifo(wire, 0o600)
        os.chmod(wire, 0o622)
        with open(TRIPWIRE_CONFIG, "w") as f:
            f.write("\n".join([wire, *(os.path.join(root, p) for p in agent_files)]) + "\n")
        os.chmod(TRIPWIRE_CONFIG, 0o644)
    _ensure_account(uid, home)
    _make_home(uid, home)
    for dirpath, dirnames, _ in os.walk(root):
        if dirpath == root and ".git" in dirnames:
            dirnames.remove(".git")
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        os.chmod(dirpath, 0o1777)


def _make_home(uid: int, home: str) -> None:
    os.makedirs(home, exist_ok=True)
    # the repository belongs to root: git would refuse it to another user without this
    with open(os.path.join(home, ".gitconfig"), "w") as f:
        f.write("[safe]\n\tdirectory = *\n")
    for path in (home, os.path.join(home, ".gitconfig")):
        os.chown(path, uid, uid)


def clear_outside(uid: int, home: str, outside: tuple[str, ...] = OUTSIDE) -> None:
    """Remove everything ``uid`` left in its home and the temporary folders, and give it a fresh home: after a
    set-up run as that user (an install's scratch files, pip's stash of what it could not uninstall), so
    the tests start from nothing of it there, and what they leave there is theirs alone."""
    import shutil

    for top in (home, *outside):
        try:
            names = os.listdir(top)
        except OSError:
            continue
        for name in names:
            path = os.path.join(top, name)
            if path == home:
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_uid != uid and top != home:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass
    _make_home(uid, home)


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


class _Wire:
    """Root's end of the tripwire's FIFO: opened read-write before the tests start (so no writer ever blocks
    on a missing reader), its buffer raised to the kernel's maximum, and read once no process of the tests'
    is left. A flood beyond the buffer blocks its writer until the time limit: only tampering writes here."""

    LIMIT = 1_000_000

    def __init__(self, path: str | None):
        self.fd = None
        if path is None or not os.path.exists(path):
            return
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        try:
            import fcntl

            with open("/proc/sys/fs/pipe-max-size") as f:
                fcntl.fcntl(self.fd, 1031, int(f.read()))  # F_SETPIPE_SZ
        except (OSError, ValueError, ImportError):
            pass

    def close(self) -> str:
        """Everything written so far (call once no writer is left)."""
        if self.fd is None:
            return ""
        data = bytearray()
        while len(data) <= self.LIMIT:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        os.close(self.fd)
        return bytes(data[:self.LIMIT]).decode("utf-8", "replace")


def run(root: str, uid: int, home: str, argv: list[str], evidence: str | None, timeout_s: float | None = None,
        wire: str | None = None, clear: bool = False) -> int:
    """Run ``argv`` as ``uid`` and wait for it, then ``finish``; its status as a shell gives it (128 + N for
    signal N). This process stays root's, out of the tests' reach. With ``timeout_s``: once that many
    seconds have passed, every process of ``uid`` is killed (the command too). What root found (the audit,
    the timeout, the tripwire's records) goes to ``evidence``/finish.json, a folder only root opens."""
    reader = _Wire(wire)
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
    code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    finish(root, uid, home, evidence, {"timed_out": timed_out, "status": code}, reader)
    if clear:
        clear_outside(uid, home)
    return code


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def finish(root: str, uid: int, home: str, evidence: str | None, found: dict, reader: _Wire | None = None) -> None:
    """Once the tests' command is over: no process of theirs is left, then what they left is audited and
    root's findings written to ``evidence``/finish.json, where only root can read them (without a folder,
    as a grading sandbox always has, the audit's line is printed)."""
    import json

    killall(uid)
    found = dict(found, audit=audit(root, uid, home), tripwire=reader.close() if reader else "")
    if evidence is None:
        print(AUDIT_LINE + json.dumps(found["audit"], sort_keys=True), flush=True)
        return
    with open(os.path.join(evidence, "finish.json"), "w") as f:
        json.dump(found, f)


def _live_processes(uid: int) -> list[int]:
    """Processes of ``uid`` with a thread that is not a zombie: a process whose main thread has exited shows
    as a zombie while its other threads still run, so every thread is looked at."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            tasks = os.listdir(f"/proc/{name}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{name}/task/{tid}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                pids.append(int(name))
                break
    return pids


def killall(uid: int) -> None:
    """Every process of ``uid`` SIGKILLed until none is left: ``kill(-1)`` from a process of that user reaches
    all of them at once, whatever they are called, however they detached, zombie leaders with live threads
    included; the kernel lets no fork slip through one such sweep. Repeated until /proc shows none alive."""
    import time

    for _ in range(100):
        live = _live_processes(uid)
        if not live:
            return
        try:
            pid = os.fork()
        except OSError:  # no process to spare (the tests used the pids limit up): one by one, as root
            for victim in live:
                _kill(victim)
            time.sleep(0.01)
            continue
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            except BaseException:
                pass
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.01)


def glob_match(name: str, pattern: str) -> bool:
    """``fnmatch`` for patterns whose only wildcard is ``*`` (fnmatch imports ``re``: a cost in every grading)."""
    pieces = pattern.split("*")
    if len(pieces) == 1:
        return name == pattern
    if not (name.startswith(pieces[0]) and name.endswith(pieces[-1])) or len(name) < len(pieces[0]) + len(pieces[-1]):
        return False
    at, end = len(pieces[0]), len(name) - len(pieces[-1])
    for piece in pieces[1:-1]:
        at = name.find(piece, at, end)
        if at < 0:
            return False
        at += len(piece)
    return True


def planted_reason(path: str) -> str | None:
    """Why a file the tests created at ``path`` (relative) is evidence of tampering, or None."""
    parts = path.split("/")
    name = parts[-1]
    if name in PLANTED_NAMES:
        return "configures the test runner"
    for part in parts:
        if any(glob_match(part, g) for g in PLANTED_GLOBS):
            return "a start-up hook, packaging metadata or pytest's bytecode cache"
    # at an import root (the repository or src/), a new module answers imports a re-run Python makes
    # at start-up under an innocent name (Debian's sitecustomize imports one)
    rest = parts[1:] if parts[0] == "src" and len(parts) > 1 else parts
    if (len(rest) == 1 and name.endswith(MODULE_SUFFIXES)) or (len(rest) == 2 and name == "__init__.py"):
        return "a new module at an import root"
    return None


STARTUP_GLOBS = ("*.pth", "sitecustomize*", "usercustomize*", "*.egg-link", "*.dist-info", "*.egg-info")
MAX_AUDITED = 200_000


def outside_reason(path: str, top: str = "", outside: tuple[str, ...] = OUTSIDE) -> str | None:
    """Why a file the tests created at ``top``/``path``, outside the repository, is evidence of tampering, or
    None: what a Python start-up reads (a path hook, a customize module, packaging metadata), and bytecode laid
    out as a pycache-prefix tree over a real source outside the tests' scratch folders (the repository's, the
    environment's), which an interpreter pointed at that prefix would load in place of the source. A conftest,
    a test file or bytecode of the tests' own scratch modules is what pytest's own tests (and pytester's) make."""
    parts = path.split("/")
    for part in parts:
        if any(glob_match(part, g) for g in STARTUP_GLOBS):
            return "a start-up hook or packaging metadata outside the repository"
    if parts[-1].endswith((".pyc", ".pyo")):
        full = [p for p in (top.rstrip("/") + "/" + path).split("/") if p]
        stem = parts[-1].split(".", 1)[0]
        scratch = tuple(o.rstrip("/") + "/" for o in outside if o)
        for start in range(1, len(full) - 1):  # every way the path can be a prefix followed by a source's folder
            folder = "/" + "/".join(full[start:-1])
            if folder.endswith("/__pycache__") or (folder + "/").startswith(scratch):
                continue
            if os.path.isfile(os.path.join(folder, stem + ".py")):
                return f"bytecode over {folder}/{stem}.py laid out as a pycache-prefix tree"
    return None


def _owned(top: str, uid: int, skip: str | None = None):
    """(path relative to ``top``, is_dir) of every entry below ``top`` that ``uid`` owns, links not followed."""
    seen = 0
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top and ".git" in dirnames and skip is None:
            dirnames.remove(".git")
        if skip is not None:
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) != skip]
        for name in dirnames + filenames:
            seen += 1
            if seen > MAX_AUDITED:
                yield "", False  # more than an audit reads: only the tests could have made so many
                return
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if st.st_uid == uid:
                yield os.path.relpath(full, top), name in dirnames
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]


def audit(root: str, uid: int, home: str | None = None, outside: tuple[str, ...] = OUTSIDE) -> dict[str, str]:
    """What the tests created that changes how tests are collected or how an interpreter starts: in the
    repository by ``planted_reason``, bytecode anywhere in it (the tests run with bytecode writing off);
    in their home, /tmp, /var/tmp and /dev/shm by ``outside_reason``."""
    planted = {}
    for rel, _ in _owned(root, uid):
        reason = planted_reason(rel) if rel else "more files than an audit reads"
        if reason is None and rel.endswith((".pyc", ".pyo")):
            reason = "bytecode the tests wrote (an import would load it in place of the source)"
        if reason:
            planted[rel] = reason
    for top in ([home] if home else []) + list(outside):
        if not os.path.isdir(top) or os.path.realpath(top) == os.path.realpath(root):
            continue
        for rel, _ in _owned(top, uid, skip=root):
            reason = outside_reason(rel, top, outside) if rel else "more files than an audit reads"
            if reason:
                planted[os.path.join(top, rel)] = reason
    return planted


FRAME_LINE = "@@swerl-root "  # root's answer, printed by the grading command (plan.root_answer_lines)


def main(argv: list[str]) -> int:
    cmd = argv[1]
    if cmd == "run":  # run ROOT UID HOME [--timeout-s S] [--evidence DIR] [--wire FIFO] [--clear-outside 1] -- CMD...
        sep = argv.index("--")
        options = dict(zip(argv[5:sep:2], argv[6:sep:2]))
        timeout_s = float(options["--timeout-s"]) if "--timeout-s" in options else None
        return run(argv[2], int(argv[3]), argv[4], argv[sep + 1:], options.get("--evidence"), timeout_s,
                   options.get("--wire"), options.get("--clear-outside") == "1")
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
