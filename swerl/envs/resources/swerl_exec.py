"""Runs one command inside a sandbox, so that its timeout really ends everything it started.

Copied into every container at start and run with the container's own python3 (-I -S,
standard library only). The command gets its own session and a tag in its environment;
when it exits or times out, every process of that session or carrying the tag is
killed, daemons included. Output is kept head and tail with a marker, so a command that
prints gigabytes costs neither memory nor a slow socket.

Prints one JSON object: exit_code, timed_out, output, total_bytes, truncated, duration_s.
With ``--once`` it is a container's own command (its source given with ``-c``): it reads from stdin
the files to write (itself among them) and the request, activates the environment the request
names, runs the command and prints the answer (a grading's one command, with neither a docker exec
nor a docker cp). ``--activate SPEC`` prints
what an activation adds to the environment. With ``--serve`` it stays up instead: one JSON request per stdin line, one JSON result
line (carrying the request's tag) per request, so a sandbox's commands cost a line on an
open stream rather than a docker exec each.
"""

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time

TAG_VAR = "SWERL_EXEC_TAG"


def _environ_has_tag(pid, tag):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{TAG_VAR}={tag}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def _session_of(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[3])  # session id: field 6 of stat, 4th after the command name
    except (OSError, IndexError, ValueError):
        return None


def _stat(pid):
    """(parent pid, start time in clock ticks) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[19])  # ppid: field 4; starttime: field 22
    except (OSError, IndexError, ValueError):
        return None


def kill_until_none(victims_now):
    """SIGKILL whatever ``victims_now()`` lists, again and again until it lists nothing."""
    for _ in range(50):
        victims = victims_now()
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


def sweep():
    """SIGKILL every process but the container's init, its first child (the container's own command,
    the oldest: whatever a command detaches is reparented to init later) and this runner, until none is left.

    Nothing a command started, however it detached (setsid, a cleared environment, a new name),
    outlives it."""
    me = os.getpid()

    def victims():
        procs = {int(n): _stat(int(n)) for n in os.listdir("/proc") if n.isdigit()}
        procs = {pid: st for pid, st in procs.items() if st is not None}
        children_of_init = [(st[1], pid) for pid, st in procs.items() if st[0] == 1]
        keep = {1, me, min(children_of_init)[1] if children_of_init else -1}
        return [pid for pid in procs if pid not in keep]

    kill_until_none(victims)


def kill_tagged(tag, session):
    """SIGKILL every process in ``session`` or carrying ``tag``; repeat until none is left."""
    if not os.path.isdir("/proc"):  # no procfs (a local sandbox on macOS): the session's group is all there is to find
        if session is not None:
            try:
                os.killpg(session, signal.SIGKILL)
            except OSError:
                pass
        return
    me = os.getpid()

    def victims():
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in (me, 1)]
        return [pid for pid in pids
                if (session is not None and _session_of(pid) == session) or _environ_has_tag(pid, tag)]

    kill_until_none(victims)


class Capture:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest."""

    def __init__(self, limit):
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk):
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self):
        dropped = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if dropped <= 0:
            return head + tail, False
        return f"{head}\n[... {dropped} bytes of output truncated ...]\n{tail}", True


# set on an agent's container to start the serving runner (container_files.SERVE_ENV, which this stdlib-only
# file cannot import); the serving shell unsets them, and a docker exec would inherit them
SANDBOX_START_VARS = ("SANDBOX_INIT", "SANDBOX_RUNNER")


def start_command(argv, cwd, env, capture):
    """``(proc, reader, waiter)``: the command started in its own session, its output pumped into ``capture`` by
    ``reader``, and ``waiter`` blocked in its waitpid.

    Both threads exist before the command starts: its processes count against the sandbox's process limit, and a
    fork bomb that filled it first would leave the runner unable to start a thread, and so to answer. The waiter
    is joined with a timeout: Popen.wait(timeout) polls, and its sleeps (up to 50 ms) were added to every command's end.
    """
    read_fd, write_fd = os.pipe()
    handed = []
    ready = threading.Event()

    def pump():
        while True:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                os.close(read_fd)
                return
            capture.feed(chunk)

    def wait():
        ready.wait()
        if handed:
            handed[0].wait()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    try:
        handed.append(subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=write_fd,
                                       stderr=subprocess.STDOUT, start_new_session=True))
    finally:
        os.close(write_fd)  # the command holds the pipe's write end now; EOF comes when it and its children end
        ready.set()
    return handed[0], reader, waiter


def run(args):
    """Run one request; returns the result object."""
    if args.get("kill_tag"):
        kill_tagged(args["kill_tag"], None)
        return {"killed": True}
    if "write" in args:
        write_files(args["write"])
        return {"written": len(args["write"])}
    tag, timeout, limit = args["tag"], args.get("timeout"), args["limit"]
    env = dict(os.environ)
    for name in SANDBOX_START_VARS:  # how the sandbox started its runner: not the command's business
        env.pop(name, None)
    env.update(args.get("env") or {})
    env[TAG_VAR] = tag
    env["SWERL_PYTHON"] = sys.executable  # the image's own python3, for swerl's helpers inside the command
    shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    capture = Capture(limit)
    start = time.monotonic()
    proc, reader, waiter = start_command([shell, "-c", args["cmd"]], args.get("cwd") or "/", env, capture)
    waiter.join(timeout)
    timed_out = waiter.is_alive()
    code = None if timed_out else proc.returncode
    kill_tagged(tag, proc.pid)  # the command's session id is its pid
    if args.get("sweep"):
        sweep()
    if code is None:
        code = proc.wait()
    reader.join(timeout=2.0)  # a grandchild holding the pipe is dead by now
    output, truncated = capture.text()
    return {
        "exit_code": 124 if timed_out else (128 - code if code < 0 else code),  # shell convention for signals
        "timed_out": timed_out,
        "output": output,
        "total_bytes": capture.total,
        "truncated": truncated,
        "duration_s": round(time.monotonic() - start, 4),
    }


SHELL_OWN_VARS = frozenset({"SHLVL", "_", "PWD", "OLDPWD"})


def activation_env(spec):
    """What sourcing ``spec["lines"]`` adds to or changes in the environment; {} when ``spec["probe"]``
    (the activated python) is not there. Raises RuntimeError when the activation fails."""
    if not spec or not spec.get("lines"):
        return {}
    if spec.get("probe") and not os.access(spec["probe"], os.X_OK):
        return {}
    done = subprocess.run(["/bin/bash", "-c", "{ " + spec["lines"] + " ; } >/dev/null 2>&1 && env -0"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"activating the environment failed (exit {done.returncode}): {spec['lines']!r}")
    after = dict(kv.split("=", 1) for kv in done.stdout.decode("utf-8", "replace").split("\0") if "=" in kv)
    return {k: v for k, v in after.items() if k not in SHELL_OWN_VARS and os.environ.get(k) != v}


def write_files(files):
    """``{absolute path: [base64 data, mode]}`` written as root; missing folders are made (0755)."""
    for path, (data, mode) in files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(base64.b64decode(data))


def once():
    """Write the files sent on stdin, run the request sent with them, print the answer with the activated
    environment and this python's path (for the host to reuse)."""
    sent = json.loads(sys.stdin.buffer.read())
    write_files(sent["files"])
    args = sent["request"]
    answer = {"python": sys.executable}
    try:
        activated = activation_env(args.get("activate"))
    except RuntimeError as e:
        answer["activation_error"] = str(e)
    else:
        if "activate" in args:
            answer["activated_env"] = activated
        args["env"] = {**activated, **(args.get("env") or {})}
        try:
            answer.update(run(args))
        except Exception as e:
            answer["error"] = f"{type(e).__name__}: {e}"
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    sys.stdout.flush()


def serve(lifetime_s=None):
    """Answer one request per line of stdin until it closes; as a container's own command (``lifetime_s``
    given), also end after that many seconds, as the `sleep <lifetime>` of a container without it would."""
    if lifetime_s:
        timer = threading.Timer(lifetime_s, os._exit, (0,))
        timer.daemon = True  # end-of-file on stdin still ends the runner at once
        timer.start()
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        args = {}
        try:
            args = json.loads(line)
            result = run(args)
        except Exception as e:  # a bad request answers with its error; the server stays up
            args = args if isinstance(args, dict) else {}
            result = {"error": f"{type(e).__name__}: {e}"}
        result["tag"] = args.get("tag") or args.get("kill_tag")
        out.write(json.dumps(result) + "\n")
        out.flush()


def main():
    if sys.argv[1:2] == ["--serve"] and len(sys.argv) <= 3:
        serve(float(sys.argv[2]) if len(sys.argv) == 3 else None)
    elif sys.argv[1:] == ["--once"]:
        once()
    elif sys.argv[1:2] == ["--activate"]:
        try:
            print(json.dumps({"env": activation_env(json.loads(sys.argv[2]))}))
        except RuntimeError as e:
            print(json.dumps({"activation_error": str(e)}))
    else:
        print(json.dumps(run(json.loads(sys.argv[1]))))


if __name__ == "__main__":
    main()
