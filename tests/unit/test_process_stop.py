"""Stopping what swerl started: a whole process group by its leader's pid or Popen, and the
processes a library spawned inside ours."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from swerl.util.processes import ProcessGroupError, child_pids, group_members, new_children, reap_processes, stop_group

# A leader that ignores SIGTERM with a child of its own, like vLLM's API server and its workers.
STUBBORN = "import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); subprocess.Popen(['sleep', '300']); time.sleep(300)"


def start_group(script: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(group_members(proc.pid)) < 2 and time.monotonic() < deadline:  # the child is up
        time.sleep(0.05)
    return proc


def test_stop_group_by_popen_kills_a_leader_that_ignores_sigterm_and_keeps_its_exit_code():
    proc = start_group(STUBBORN)
    assert len(group_members(proc.pid)) == 2
    t0 = time.monotonic()
    stop_group(proc, grace_s=0.3)
    assert group_members(proc.pid) == [] and proc.returncode == -9 and time.monotonic() - t0 < 5


def test_stop_group_by_pid_reaps_our_child_and_a_vanished_group_is_no_error():
    proc = start_group("import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)")
    stop_group(proc.pid, grace_s=5)  # both exit on SIGTERM, well within the grace period
    assert group_members(proc.pid) == []
    stop_group(proc.pid, grace_s=0.1)


def test_a_group_that_survives_sigkill_is_an_error(monkeypatch):
    proc = start_group(STUBBORN)
    try:
        monkeypatch.setattr("swerl.util.processes.os.killpg", lambda pgid, sig: None)  # signals that never arrive
        with pytest.raises(ProcessGroupError, match=f"process group {proc.pid} survived SIGKILL"):
            stop_group(proc, grace_s=0.1, kill_wait_s=0.1)
    finally:
        monkeypatch.undo()
        stop_group(proc, grace_s=0.1)


def test_reap_processes_kills_new_children_that_outlive_the_grace_period():
    before = child_pids()
    proc = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
    spawned = new_children(before)
    assert [p.pid for p in spawned] == [proc.pid]
    t0 = time.monotonic()
    reap_processes(spawned, grace_s=0.2)
    assert not spawned[0].is_running() and time.monotonic() - t0 < 5  # psutil reaped it: Popen sees no code
