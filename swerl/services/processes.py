"""Pid files and process groups: start a service detached, recognise it later, stop only our own.

Each service leads its own session (so its process group id is its pid); a pid file records
the pid with the exact command line and port, and a pid is only signalled while
/proc/<pid>/cmdline still equals that command, so a recycled pid is never killed.
Linux only (/proc).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# The group-stopping helpers are swerl's one implementation; swerl.services.stack reaches them here.
from swerl.util.processes import group_members, is_running, reap, stop_group  # noqa: F401


@dataclass
class PidRecord:
    name: str
    pid: int
    command: list[str]
    port: int | None
    started_at: float

    def write(self, run_dir: Path) -> Path:
        run_dir.mkdir(parents=True, exist_ok=True)
        path = pid_path(run_dir, self.name)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)
        return path


def pid_path(run_dir: Path, name: str) -> Path:
    return run_dir / f"{name}.json"


def read_record(run_dir: Path, name: str) -> PidRecord | None:
    """The service's record, or None; an unreadable file counts as stale and is removed."""
    path = pid_path(run_dir, name)
    try:
        data = json.loads(path.read_text())
        return PidRecord(name=data["name"], pid=int(data["pid"]), command=list(data["command"]),
                         port=data.get("port"), started_at=float(data["started_at"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)
        return None


def remove_record(run_dir: Path, name: str) -> None:
    pid_path(run_dir, name).unlink(missing_ok=True)


def cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1] if raw else []


def is_ours(record: PidRecord) -> bool:
    """The recorded pid is alive and still runs the recorded command."""
    return is_running(record.pid) and cmdline(record.pid) == record.command


def start(name: str, command: list[str], env: dict[str, str], cwd: Path, log: Path, port: int | None,
          run_dir: Path, user: str | None = None) -> tuple[subprocess.Popen, PidRecord]:
    """Start `command` in a new session (as `user` when given), stdout and stderr appended to `log`, and record it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} swerl up: {' '.join(command)}\n".encode())
        out.flush()
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, user=user)
    record = PidRecord(name=name, pid=proc.pid, command=command, port=port, started_at=time.time())
    record.write(run_dir)
    return proc, record


def port_free(host: str, port: int) -> bool:
    """Whether a server could bind host:port now (SO_REUSEADDR, as servers set it, so TIME_WAIT does not count)."""
    try:
        infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror:
        return True  # an unresolvable host is the server's error to report, with its own words
    family, socktype, proto, _, addr = infos[0]
    with socket.socket(family, socktype, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError:
            return False
    return True


def log_tail(log: Path, offset: int = 0, lines: int = 30) -> str:
    """The last lines written to `log` after byte `offset`."""
    try:
        with log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.strip().splitlines()[-lines:]
    return "\n".join(tail) if tail else "(log is empty)"
