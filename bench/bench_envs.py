"""Environment benchmarks: sandbox exec overhead, container start latency, grading throughput,
grading time per task (every defence layer on) against the test command alone, and instance
image builds.

    .venv/bin/python bench/bench_envs.py [--execs 50] [--starts 8] [--concurrency 1 2 4] [--grading-reps 2]
                                         [--builds 24] [--sections exec start throughput per-task builds]

Builds the demo images first (cached), then prints figures; ratios are against raw
Docker measured in the same run. ``builds`` builds the instance images of ``--builds``
generated curriculum tasks under throwaway tags, interleaved: as swerl builds them, with the
daemon's layer cache looked up (what-if), and with that and the ``RUN git status`` step they
used to end with (a build container per image: how they were built before); the images are
removed afterwards.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from swerl.data.loaders import load_tasks
from swerl.demo import materialize_demo
from swerl.envs.docker_client import docker_client
from swerl.envs.docker_sandbox import DockerSandbox, DockerSandboxConfig
from swerl.envs.images import ImageBuilder, ImageConfig
from swerl.grading.grader import GradingConfig, grade_many


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:7.1f} ms  p90 {sorted(xs)[int(0.9 * (len(xs) - 1))] * 1e3:7.1f} ms"


SECTIONS = ("exec", "start", "throughput", "per-task", "builds")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--execs", type=int, default=50)
    ap.add_argument("--starts", type=int, default=8)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--grading-reps", type=int, default=2, help="Repetitions of the per-task grading vs test-command "
                    "comparison (bench_grading.py measures more tasks).")
    ap.add_argument("--builds", type=int, default=24, help="Curriculum tasks whose instance images the builds section makes.")
    ap.add_argument("--build-rounds", type=int, default=2)
    ap.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="swerl-bench-"))
    demo = materialize_demo(work / "demo")
    tasks = load_tasks(demo.tasks_file).tasks
    outcomes = ImageBuilder(ImageConfig(repos=demo.repos_dir, build_logs=work / "builds")).build_all(tasks)
    images = {o.instance_id: o.image for o in outcomes if o.ok}
    image = images[tasks[0].instance_id]
    client = docker_client()
    cmd = "git status --short | wc -l"

    print(f"# swerl environment benchmarks ({len(tasks)} demo tasks, image {image})\n")
    if "exec" in args.sections:
        with DockerSandbox(image, DockerSandboxConfig()) as sb:
            cid = sb.container_id
            sb.exec(cmd)
            ours = timed(lambda: sb.exec(cmd), args.execs)
            raw_cli = timed(lambda: subprocess.run(["docker", "exec", "-w", "/testbed", cid, "bash", "-c", cmd], capture_output=True, check=True), args.execs)
            container = client.containers.get(cid)
            raw_api = timed(lambda: container.exec_run(["bash", "-c", cmd], workdir="/testbed"), args.execs)
        with DockerSandbox(image, DockerSandboxConfig(exec_channel=True)) as sb:
            sb.exec(cmd)
            channel = timed(lambda: sb.exec(cmd), args.execs)
        print("## exec overhead (same command, same container)")
        print(f"sandbox.exec          {ms(ours)}")
        print(f"sandbox.exec, channel {ms(channel)}   ratio channel/raw CLI = {statistics.median(channel) / statistics.median(raw_cli):.2f}x")
        print(f"raw docker exec (CLI) {ms(raw_cli)}   ratio sandbox/raw = {statistics.median(ours) / statistics.median(raw_cli):.2f}x")
        print(f"raw exec_run (API)    {ms(raw_api)}   ratio sandbox/raw = {statistics.median(ours) / statistics.median(raw_api):.2f}x\n")

    if "start" in args.sections:
        base = tasks[0].base_commit

        def agent_sandbox() -> None:  # as rollouts make them: the exec channel on, base_commit known
            with DockerSandbox(image, DockerSandboxConfig(exec_channel=True), base_commit=base) as s:
                s.exec("true")

        def exec_each() -> None:
            with DockerSandbox(image, DockerSandboxConfig(), base_commit=base) as s:
                s.exec("true")

        def one_shot() -> None:  # as gradings run: the command is the container's own
            s = DockerSandbox(image, DockerSandboxConfig())
            try:
                s.run_once("true")
            finally:
                s.close()

        def raw_run() -> None:
            subprocess.run(["docker", "run", "--rm", "--network", "none", image, "true"], capture_output=True, check=True)

        for warm in (agent_sandbox, exec_each, one_shot, raw_run):  # the image's python3 and environment, probed once
            warm()
        starts = {name: [] for name in ("agent", "exec", "once", "raw")}
        for _ in range(args.starts):  # interleaved, so load drifts reach every variant alike
            for name, fn in (("agent", agent_sandbox), ("exec", exec_each), ("once", one_shot), ("raw", raw_run)):
                starts[name] += timed(fn, 1)
        raw = statistics.median(starts["raw"])
        print("## container start latency (start, first command, removal)")
        for name, label in (("agent", "agent sandbox (channel)"), ("exec", "exec per command     "),
                            ("once", "run_once (grading)   ")):
            print(f"{label}  {ms(starts[name])}   ratio to docker run = {statistics.median(starts[name]) / raw:.2f}x")
        print(f"raw docker run --rm      {ms(starts['raw'])}\n")

    if "throughput" in args.sections:
        print("## grading throughput (gold patches, fresh sandbox each)")
        base = None
        for c in args.concurrency:
            jobs = [(t, t.patch, images[t.instance_id], "gold") for t in tasks]
            t0 = time.perf_counter()
            results = grade_many(jobs, GradingConfig(), concurrency=c)
            wall = time.perf_counter() - t0
            per_min = len(jobs) / wall * 60
            base = base or per_min
            ok = sum(r.resolved for r in results)
            print(f"concurrency {c}: {len(jobs)} tasks in {wall:6.1f} s = {per_min:5.1f} tasks/min "
                  f"({per_min / base:.2f}x of concurrency {args.concurrency[0]}), resolved {ok}/{len(jobs)}")

    if "per-task" in args.sections:
        grading_vs_test_command(tasks, images, args.grading_reps)

    if "builds" in args.sections:
        instance_builds(work, args.builds, args.build_rounds)


def instance_builds(work: Path, count: int, rounds: int) -> None:
    """Instance images of generated tasks as built now, against the layer cache looked up, and that plus ``RUN git status``."""
    import uuid
    from unittest import mock

    from swerl.curriculum.config import CurriculumConfig
    from swerl.curriculum.generate import generate_curriculum
    from swerl.envs import images as im

    generated = generate_curriculum(work / "curriculum", CurriculumConfig(seed=7, warmup=count, train=1, heldout=1))
    tasks = load_tasks(generated.tasks_files["warmup"]).tasks
    config = ImageConfig(repos=generated.repos_dir, build_logs=work / "builds", builds=8)
    ImageBuilder(config).build_all(tasks[:1])  # the environment image, shared by every variant
    now = im.instance_dockerfile

    def with_git_status(task, env_tag: str) -> str:
        return now(task, env_tag) + "RUN git status --porcelain --untracked-files=no > /dev/null\n"

    build_image = im.build_image

    def cached_build(*a, **kw):
        return build_image(*a, **{**kw, "use_cache": True})

    run = uuid.uuid4().hex[:8]
    variants = {"now": (now, build_image), "layer cache": (now, cached_build), "git status": (with_git_status, cached_build)}
    walls: dict[str, list[float]] = {name: [] for name in variants}
    client = docker_client()
    try:
        for r in range(rounds):  # interleaved, so load drifts reach every variant alike
            for name, (dockerfile, build) in variants.items():
                prefix = f"swerl-bench-build:{run}-{r}-{name.replace(' ', '')}"
                with mock.patch.object(im, "instance_tag", lambda t, _env, p=prefix: f"{p}-{im.tag_name(t.instance_id)}"), \
                        mock.patch.object(im, "instance_dockerfile", dockerfile), mock.patch.object(im, "build_image", build):
                    t0 = time.perf_counter()
                    outcomes = ImageBuilder(config).build_all(tasks)
                    walls[name].append(time.perf_counter() - t0)
                failed = [o.instance_id for o in outcomes if not o.ok]
                if failed:
                    raise RuntimeError(f"builds failed: {failed[:3]}; logs under {work / 'builds'}")
    finally:
        for image in client.images.list(name="swerl-bench-build"):
            if any(tag.split(":", 1)[1].startswith(run) for tag in image.tags):
                client.images.remove(image.id, force=True)
    print(f"## instance image builds ({len(tasks)} curriculum tasks, 8 at once, {rounds} rounds interleaved)")
    base = statistics.median(walls["git status"])
    for name, label in (("now", "as built now          "), ("layer cache", "with the layer cache  "),
                        ("git status", "cache + RUN git status")):
        wall = statistics.median(walls[name])
        print(f"{label} median {wall:6.1f} s = {wall / len(tasks) * 1e3:6.0f} ms per image   ratio to git status = "
              f"{wall / base:.2f}x")


def grading_vs_test_command(tasks, images: dict[str, str], reps: int) -> None:
    """Per task, side by side: a grading with every layer (guard, test user, canaries, evidence) against the
    test command alone in the same image: its plain ``docker run`` and its in-container time
    (bench_grading.py's measurements, on more tasks)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_grading import GOAL, grading_time, test_command_alone

    config = GradingConfig()
    print(f"\n## grading time per task against the test command alone (medians of {reps}, goal <= {GOAL}x its docker run)")
    ratios = []
    for task in tasks:
        image = images[task.instance_id]
        test_command_alone(task, image, config)  # warm-up
        graded, inside, run = [], [], []
        for _ in range(reps):
            graded.append(grading_time(task, image, config, []))
            alone = test_command_alone(task, image, config)
            inside.append(alone[0])
            run.append(alone[1])
        g, t, r = statistics.median(graded), statistics.median(inside), statistics.median(run)
        ratios.append(g / r)
        print(f"{task.instance_id:<28} grading {g:5.2f} s  docker run {r:5.2f} s ({g / r:4.2f}x)  "
              f"in-container test time {t:5.2f} s ({g / t:4.2f}x)")
    print(f"median ratio to docker run {statistics.median(ratios):.2f}x; {sum(x <= GOAL for x in ratios)}/{len(ratios)} "
          f"within {GOAL}x")


if __name__ == "__main__":
    main()
