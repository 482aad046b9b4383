"""A second Docker daemon on this machine, in its own network namespace, reached over TCP like a remote host.

    with netns_dockerd() as host:       # host.url == "tcp://10.201.0.2:2375"
        host.kill()                      # SIGKILL: the host "dies"
        host.start()                     # and comes back (same data root)

Set-up: ``ip netns add``, a veth pair (10.201.0.1/24 here, 10.201.0.2/24 inside), then ``dockerd -H
tcp://10.201.0.2:2375`` with its own data and exec roots, no bridge and no iptables rules, trusting a
plain-HTTP registry on 10.201.0.0/24 (``--insecure-registry``: the other end of the veth), started in
the namespace with ``nsenter --net`` (``ip netns exec`` remounts /sys, which some sandboxes refuse).
Tear-down stops the daemon, ends what it started (its containerd and shims, found by its exec root),
unmounts and removes its roots and deletes the namespace. One session at a time holds a name (a lock
file another session waits on; the kernel drops it when its holder dies), so leftovers of a killed
earlier run of the same name are removed first. ``NamespaceUnavailable`` says why a daemon cannot be
made here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO


class NamespaceUnavailable(RuntimeError):
    """This machine cannot make a network namespace or run a second dockerd (not root, tools missing)."""


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise NamespaceUnavailable(f"`{' '.join(argv)}` failed: {res.stderr.strip()[:300]}")
    return res


@dataclass
class NetnsDockerd:
    name: str = "swerl-test-host2"
    subnet: str = "10.201.0"
    port: int = 2375
    unix_socket: bool = False  # also listen on socket_url: reachable from any network namespace of this machine
    process: subprocess.Popen | None = None
    _lock: IO[str] | None = None

    @property
    def url(self) -> str:
        return f"tcp://{self.subnet}.2:{self.port}"

    @property
    def socket_url(self) -> str:
        """The daemon's Unix socket (with ``unix_socket``): a file, so processes in other namespaces reach it too."""
        return f"unix://{self.exec_root}/docker.sock"

    @property
    def data_root(self) -> Path:
        return Path(f"/var/lib/{self.name}")

    @property
    def exec_root(self) -> Path:
        return Path(f"/run/{self.name}")

    @property
    def log(self) -> Path:
        return Path(f"/tmp/{self.name}-dockerd.log")

    def _veth(self) -> tuple[str, str]:
        base = self.name.replace("-", "")[-11:]
        return f"{base}-h", f"{base}-n"

    def create(self) -> None:
        missing = [t for t in ("ip", "nsenter", "dockerd") if shutil.which(t) is None]
        if missing:
            raise NamespaceUnavailable(f"{', '.join(missing)} not found")
        if os.geteuid() != 0:
            raise NamespaceUnavailable("network namespaces and a second dockerd need root")
        self._lock = open(f"/run/{self.name}.lock", "w")  # noqa: SIM115 - held until destroy
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # another session using this name: wait for it to finish
        self.destroy(unlock=False)
        outside, inside = self._veth()
        _run("ip", "netns", "add", self.name)
        ns = ("nsenter", f"--net=/run/netns/{self.name}")
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", inside, "netns", self.name)
        _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", outside)
        _run("ip", "link", "set", outside, "up")
        _run(*ns, "ip", "addr", "add", f"{self.subnet}.2/24", "dev", inside)
        _run(*ns, "ip", "link", "set", inside, "up")
        _run(*ns, "ip", "link", "set", "lo", "up")
        self.start()

    def start(self, wait_s: float = 90.0) -> None:
        """Start (or restart) the daemon and wait until it answers."""
        import docker

        self.exec_root.mkdir(parents=True, exist_ok=True)
        log = self.log.open("ab")
        self.process = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.name}", "dockerd", "-H", self.url, "--data-root", str(self.data_root),
             *(["-H", self.socket_url] if self.unix_socket else []),
             "--exec-root", str(self.exec_root), "--pidfile", str(self.exec_root / "dockerd.pid"), "--bridge=none",
             "--iptables=false", "--tls=false",  # explicit: no 15 s start-up warning delay
             # a plain-HTTP registry on this machine's side of the veth (tests/support/registry.py)
             "--insecure-registry", f"{self.subnet}.0/24"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NamespaceUnavailable(f"dockerd exited ({self.process.returncode}): {self._log_tail()}")
            with contextlib.suppress(Exception):
                if docker.APIClient(base_url=self.url, timeout=2).ping():
                    return
            time.sleep(0.5)
        raise NamespaceUnavailable(f"dockerd did not answer at {self.url} within {wait_s:.0f}s: {self._log_tail()}")

    def restart(self) -> None:
        """Start again after ``kill``: what the dead daemon started (its containerd holds the exec root's socket) goes first."""
        self.stop()
        self.start()

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-800:] if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL the daemon, the way a host dies; its containers' processes may live on until ``destroy``."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def _own_pids(self) -> list[int]:
        """Processes this daemon started (its containerd and shims): their command lines name its exec root."""
        mine = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if str(self.exec_root).encode() in (entry / "cmdline").read_bytes():
                        mine.append(int(entry.name))
        return mine

    def stop(self) -> None:
        """SIGTERM (the daemon stops its containers), then end what it started."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        pidfile = self.exec_root / "dockerd.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)  # a daemon of a killed earlier run
        for pid in self._own_pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def destroy(self, unlock: bool = True) -> None:
        """Remove everything ``create`` made (also what a killed earlier run left)."""
        self.stop()
        time.sleep(0.5)
        for root in (self.exec_root, self.data_root):
            mounts = [ln.split()[1] for ln in Path("/proc/mounts").read_text().splitlines()
                      if ln.split()[1].startswith(str(root))]
            for mount in sorted(mounts, key=len, reverse=True):
                _run("umount", "-l", mount, check=False)
            shutil.rmtree(root, ignore_errors=True)
        _run("ip", "netns", "del", self.name, check=False)
        _run("ip", "link", "del", self._veth()[0], check=False)
        if unlock and self._lock is not None:
            self._lock.close()
            self._lock = None


@contextlib.contextmanager
def netns_dockerd(name: str = "swerl-test-host2", subnet: str = "10.201.0", unix_socket: bool = False) -> Iterator[NetnsDockerd]:
    """A second daemon for the duration of the block; NamespaceUnavailable when none can be made here."""
    host = NetnsDockerd(name, subnet, unix_socket=unix_socket)
    try:
        host.create()
        yield host
    finally:
        if host._lock is not None:  # nothing was made before the lock was taken
            host.destroy()
