"""A Dask cluster of stand-in hosts for the tests: a scheduler on this machine, at a namespace link's host
address, and one single-threaded worker inside each network namespace (``tests.support.netns``), each
started from the repository root with the Prefect API URL its chunks report to.

    with dask_cluster(namespaces, prefect_api_url, logs) as address:   # "tcp://10.211.7.1:40123"
        ...
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.support.netns import Namespace
from tests.support.stacks import free_port

ROOT = Path(__file__).resolve().parents[2]


def wait_for(check, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen within {timeout_s:.0f}s")


@contextlib.contextmanager
def dask_cluster(namespaces: Sequence[Namespace], prefect_api_url: str, logs: Path,
                 names: Sequence[str] = ("worker-a", "worker-b")) -> Iterator[str]:
    """The scheduler's address while the block runs; every worker (``names[i]`` in ``namespaces[i]``) has joined."""
    from distributed import Client

    address = f"tcp://{namespaces[0].host_ip}:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_api_url, "DO_NOT_TRACK": "1",
           "PREFECT_HOME": str(logs / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", host, "--port", port,
                               "--no-dashboard"], cwd=ROOT, env=env, stdout=(logs / "scheduler.log").open("w"),
                              stderr=subprocess.STDOUT)]
    for ns, name in zip(namespaces, names, strict=True):
        procs.append(subprocess.Popen(ns.argv([sys.executable, "-m", "distributed.cli.dask_worker", address, "--name", name,
                                               "--host", ns.ip, "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                                               "--no-nanny"]),
                                      cwd=ROOT, env=env, stdout=(logs / f"{name}.log").open("w"), stderr=subprocess.STDOUT))
    try:
        with Client(address, timeout=60) as client:
            wait_for(lambda: len(client.scheduler_info()["workers"]) == len(names), f"the {len(names)} Dask workers joining")
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
