"""Sandbox start latency on a remote Docker host against the local daemon, side by side in one run.

    .venv/bin/python bench/bench_hosts.py [--starts 10]

The "remote" host is a second dockerd in a network namespace on this machine, reached over TCP
through a veth pair (tests/support/netns_docker.py; needs root): it measures the TCP API path and
the pool's own overhead, not a real network's latency. Prints the image's save/load time to the
host, then per host: a sandbox's start (container, runner, probes) and close, and a grading-style
``run_once`` (one container start with its command), each through the pool (``HostSandbox``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swerl.data.loaders import load_tasks  # noqa: E402
from swerl.demo import materialize_demo  # noqa: E402
from swerl.envs.docker_config import DockerSandboxConfig  # noqa: E402
from swerl.envs.docker_hosts import DockerHostsConfig, HostSandbox, docker_host, ensure_image  # noqa: E402
from swerl.envs.docker_reaper import reap_containers  # noqa: E402
from swerl.envs.images import ImageBuilder, ImageConfig  # noqa: E402
from tests.support.netns_docker import netns_dockerd  # noqa: E402

LOCAL = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:6.0f} ms  p90 {sorted(xs)[int(0.9 * (len(xs) - 1))] * 1e3:6.0f} ms"


def starts(url: str, image: str, n: int, run_id: str) -> tuple[list[float], list[float]]:
    """(start + exec + close, run_once + close) seconds of ``n`` sandboxes each on the host at ``url``."""
    config = DockerHostsConfig(hosts=[{"url": url, "max_concurrency": 1}], container=DockerSandboxConfig(run_id=run_id))
    started, once = [], []
    for _ in range(n):
        t = time.perf_counter()
        with HostSandbox(image, config) as sb:
            sb.exec("true")
        started.append(time.perf_counter() - t)
        t = time.perf_counter()
        sb = HostSandbox(image, config)
        try:
            sb.run_once("true")
        finally:
            sb.close()
        once.append(time.perf_counter() - t)
    return started, once


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=10)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="swerl-bench-hosts-"))
    demo = materialize_demo(work / "demo")
    task = load_tasks(demo.tasks_file).tasks[0]
    (outcome,) = ImageBuilder(ImageConfig(repos_dir=demo.repos_dir, log_dir=work / "builds")).build_all([task])
    image, run_id = outcome.image, f"bench-hosts-{os.getpid()}"
    with netns_dockerd(name="swerl-bench-host2", subnet="10.202.0") as remote:
        t = time.perf_counter()
        ensure_image(docker_host(remote.url), image)
        print(f"# sandbox start latency: local daemon vs a Docker host over TCP (image {image})\n")
        print(f"image save/load to the host: {time.perf_counter() - t:.1f} s (once per image and host)")
        try:
            for url in (LOCAL, remote.url):
                starts(url, image, 1, run_id)  # warm: python and activation probes are cached per image
            local, remote_ = (starts(url, image, args.starts, run_id) for url in (LOCAL, remote.url))
        finally:
            reap_containers(run_id=run_id, hosts=[remote.url])
        print(f"\n{'':32}{'local (' + LOCAL + ')':<42}remote ({remote.url})")
        print(f"{'start + exec true + close':32}{ms(local[0]):<42}{ms(remote_[0])}")
        print(f"{'run_once true + close':32}{ms(local[1]):<42}{ms(remote_[1])}")
        print(f"\nratio remote/local (medians): start {statistics.median(remote_[0]) / statistics.median(local[0]):.2f}x, "
              f"run_once {statistics.median(remote_[1]) / statistics.median(local[1]):.2f}x; {args.starts} each")


if __name__ == "__main__":
    main()
