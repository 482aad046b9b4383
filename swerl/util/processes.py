"""Stopping the processes swerl started, and nothing else.

Long-lived children (vLLM servers, the Prefect and MLflow services) lead their own session
(``start_new_session=True``), so the leader's pid is the process group id and one signal
reaches everything they started; ``stop_group`` is the one SIGTERM, grace, SIGKILL sequence
for them. Processes that vLLM starts inside our own group are tracked as psutil handles
instead (``new_children`` then ``reap``): a handle remembers its start time, so a recycled
pid is never killed. Linux only (/proc).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

log = logging.getLogger(__name__)


class ProcessGroupError(RuntimeError):
    """A process group outlived SIGKILL (a process stuck in the kernel, or one that left the group's reach)."""


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, ...; None when the pid is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after its closing one
    return raw[raw.rindex(")") + 2:].split()


def is_running(pid: int) -> bool:
    """A live process (zombies, which hold a pid but run nothing, are not)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def group_members(pgid: int) -> list[int]:
    """Live processes of a process group."""
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def reap(pid: int) -> bool:
    """Collect the exit status when ``pid`` is our own child, so it does not linger as a zombie.
    True once there is nothing left to collect: reaped, or not our child."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True


def stop_group(leader: int | subprocess.Popen, grace_s: float, kill_wait_s: float = 5.0) -> None:
    """SIGTERM the group that ``leader`` leads, SIGKILL what is left after ``grace_s``, and wait
    until no process of it is left; ProcessGroupError if one outlives the SIGKILL.

    ``leader`` is the leader's pid, or its Popen: then Popen reaps it and keeps its exit code
    (a bare waitpid behind Popen's back would leave it reporting 0).
    """
    pgid = leader if isinstance(leader, int) else leader.pid
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + wait_s
        while True:
            # A multi-threaded leader shows as a zombie while its other threads still exit, and
            # cannot be reaped until they have: wait for the reap itself, not for the zombie state.
            reaped = reap(pgid) if isinstance(leader, int) else leader.poll() is not None
            if reaped and not group_members(pgid):
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    raise ProcessGroupError(f"process group {pgid} survived SIGKILL: {group_members(pgid)}")


def new_children(before: set[int]) -> list:
    """psutil handles of this process's descendants whose pid is not in ``before``, leaving out
    multiprocessing's resource tracker (started by the first spawn, shared by the whole process)."""
    import psutil
    from multiprocessing import resource_tracker

    tracker = getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in children if p.pid not in before and p.pid != tracker]


def child_pids() -> set[int]:
    """Pids of this process's descendants now, for ``new_children`` later."""
    return {p.pid for p in new_children(set())}


def reap_processes(procs: list, grace_s: float) -> None:
    """Wait up to ``grace_s`` for the psutil handles ``procs`` to exit, then kill the ones left."""
    import psutil

    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        log.warning("process %d outlived its shutdown; killing it", p.pid)
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
