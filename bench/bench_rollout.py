"""Rollout benchmarks: generation throughput under multi-turn load, time split, peak memory.

    .venv/bin/python bench/bench_rollout.py [--batch 8] [--turns 4] [--new-tokens 64] \
        [--peak-trajectories 64] [--repeats 3] [--torch-threads N] [--engine-threads 1] [--stagger] \
        [--kv-keep-tokens N] [--throughput-only] \
        [--json out.json]

Builds the demo images (cached) and a tiny random Qwen2 policy in a temp folder, then:

1. runs ``--batch`` concurrent tiny-model trajectories through the rollout runner (real
   Docker sandboxes, HFEngine, grading off) and compares its action tokens/s with a raw
   batched generation of the very same prompts and token counts, turn by turn, on the same
   HFEngine (all requests at once, no environment) and with ``model.generate``;
2. splits the trajectory-seconds (batch x wall) of that run, and of a scripted-policy run
   whose commands really execute, into generation / commands / other agent work / sandbox
   start+close;
3. runs ``--peak-trajectories`` concurrent tiny-model trajectories (256 MiB sandboxes) held
   together at their first turn, and reports peak memory of this process, the containers
   and the system.

Ratios are against baselines measured in the same run; nothing is asserted about time.
The random policy seldom writes a fenced command, so its turns are format errors (no
command runs): ``max_format_errors`` is set to ``--turns`` so every trajectory still does
all its turns, and the scripted scenario provides the workload with real tool calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import psutil
import torch
from docker.errors import NotFound as DockerNotFound
from transformers import AutoModelForCausalLM, AutoTokenizer

from swerl.agent.chat_format import ChatFormat
from swerl.agent.loop import AgentConfig
from swerl.data.loaders import load_tasks
from swerl.demo import materialize_demo
from swerl.envs import labels
from swerl.envs.docker_client import docker_client
from swerl.envs.docker_sandbox import DockerSandboxConfig, reap_containers
from swerl.envs.images import ImageBuilder, ImageConfig
from swerl.inference.base import GenerationRequest
from swerl.inference.hf_engine import HFEngine, HFEngineConfig
from swerl.inference.scripted import ScriptedEngine, script_from_patch
from swerl.models.tiny import init_tiny
from swerl.rollout.runner import RolloutConfig, run_rollouts
from swerl.rollout.sampler import SamplerConfig
from swerl.rollout.store import TrajectoryStore

CGROUP_DOCKER = Path("/sys/fs/cgroup/memory/docker")
MIB = 1024 * 1024


class Probe:
    """An engine wrapper recording every request; optionally holds first turns until ``hold`` trajectories arrived."""

    def __init__(self, engine, hold: int = 0, hold_idle_s: float = 30.0) -> None:
        self.engine = engine
        self.name, self.policy_version, self.max_context = engine.name, engine.policy_version, engine.max_context
        self.requests: list[dict] = []
        self.hold, self.hold_idle_s = hold, hold_idle_s
        self.arrived: set[str] = set()
        self.created = self.last_arrival = time.monotonic()
        self.held_s = 0.0

    async def generate(self, request: GenerationRequest):
        if self.hold and request.turn == 0:
            self.arrived.add(request.trajectory_id)
            self.last_arrival = time.monotonic()
            t = time.monotonic()
            while len(self.arrived) < self.hold and time.monotonic() - self.last_arrival < self.hold_idle_s:
                await asyncio.sleep(0.05)
            self.held_s = max(self.held_s, time.monotonic() - t)
        t0 = time.monotonic()
        gen = await self.engine.generate(request)
        self.requests.append({"turn": request.turn, "trajectory": request.trajectory_id, "prompt_ids": request.prompt_ids,
                              "seed": request.seed,
                              "n": len(gen.token_ids), "t0": t0, "t1": time.monotonic()})
        return gen

    def load_weights(self, checkpoint_dir, policy_version: str) -> None:
        self.engine.load_weights(checkpoint_dir, policy_version)

    def close(self) -> None:
        pass


class MemorySampler(threading.Thread):
    """Peaks of this process's RSS, of one run's containers (cgroup v1) and shims, and of the system's used memory.

    Only containers labelled with ``run_id`` count: other users of the daemon are left out.
    """

    def __init__(self, run_id: str, interval_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.run_id = run_id
        self.interval_s = interval_s
        self.stop_event = threading.Event()
        self.proc = psutil.Process()
        self.container_max: dict[str, int] = {}
        self.base = self.snapshot()
        self.peak = dict(self.base)

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return path.read_text()
        except OSError:
            return ""

    def _ours(self) -> set[str]:
        try:
            return {c.id for c in docker_client().containers.list(sparse=True, filters={"label": f"{labels.RUN_ID}={self.run_id}"})}
        except Exception:  # a sample lost to a busy daemon is not a reason to stop sampling
            return set()

    def snapshot(self) -> dict[str, int]:
        vm = psutil.virtual_memory()
        ours = self._ours()
        usage = rss = 0
        for cid in ours:
            u = int(self._read(CGROUP_DOCKER / cid / "memory.usage_in_bytes") or 0)
            self.container_max[cid] = max(self.container_max.get(cid, 0), u)
            usage += u
            for line in self._read(CGROUP_DOCKER / cid / "memory.stat").splitlines():
                if line.startswith("total_rss "):
                    rss += int(line.split()[1])
        shims = daemons = 0
        for p in psutil.process_iter(["name", "cmdline", "memory_info"]):
            name, cmd, mem = p.info["name"] or "", p.info["cmdline"] or [], p.info["memory_info"]
            if mem is None:
                continue
            if name in ("dockerd", "containerd"):
                daemons += mem.rss
            elif name.startswith("containerd-shim") and "-id" in cmd and cmd.index("-id") + 1 < len(cmd):
                shims += mem.rss if cmd[cmd.index("-id") + 1] in ours else 0
        return {"process_rss": self.proc.memory_info().rss, "system_used": vm.total - vm.available, "containers": len(ours),
                "containers_usage": usage, "containers_rss": rss, "shims_rss": shims, "daemons_rss": daemons}

    def run(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            for k, v in self.snapshot().items():
                self.peak[k] = max(self.peak[k], v)

    def finish(self) -> dict:
        self.stop_event.set()
        self.join()
        return {"base": self.base, "peak": self.peak, "container_max_sum": sum(self.container_max.values())}


def reap(run_id: str) -> None:
    """reap_containers, retried: its containers.list() inspects each container and raises NotFound
    when one (auto-removed, or another user's) disappears between the listing and the inspect."""
    for attempt in range(5):
        try:
            reap_containers(run_id=run_id)
            return
        except DockerNotFound:
            time.sleep(0.5 * (attempt + 1))
    reap_containers(run_id=run_id)


def replicate(tasks, images: dict[str, str], n: int):
    """``n`` task copies with distinct ids (cycling over the demo tasks) and their images."""
    out, imgs = [], {}
    for k in range(n):
        t = tasks[k % len(tasks)]
        copy = t.model_copy(update={"instance_id": f"{t.instance_id}-b{k}"})
        out.append(copy)
        imgs[copy.instance_id] = images[t.instance_id]
    return out, imgs


def run(tasks, images, engine, chat, config: RolloutConfig, store_dir: Path):
    trajs = []
    t0 = time.monotonic()
    summary = asyncio.run(run_rollouts(tasks, images, engine, chat, config, TrajectoryStore(store_dir), trajs.append))
    return summary, trajs, time.monotonic() - t0


def split(trajs, wall: float) -> dict:
    """Trajectory-seconds of a run: generation, commands, other agent work, sandbox start/close and the rest."""
    n = len(trajs)
    gen = sum(t.generation_s for t in trajs)
    env = sum(t.environment_s for t in trajs)
    agent = sum(t.wall_s for t in trajs)
    sandbox = sum(t.sandbox_s for t in trajs)
    total = n * wall
    parts = {"generation_s": gen, "environment_s": env, "agent_other_s": agent - gen - env, "sandbox_s": sandbox,
             "waiting_s": total - agent - sandbox}
    return {"trajectories": n, "wall_s": wall, "trajectory_seconds": total, **parts,
            "fractions": {k: v / total for k, v in parts.items()}}


def print_split(label: str, s: dict) -> None:
    f = s["fractions"]
    print(f"{label}: {s['trajectories']} trajectories x {s['wall_s']:.1f} s wall = {s['trajectory_seconds']:.1f} trajectory-s")
    print(f"  generation (sum of per-turn waits)  {s['generation_s']:8.1f} s  {f['generation_s']:6.1%}")
    print(f"  environment (commands)              {s['environment_s']:8.1f} s  {f['environment_s']:6.1%}")
    print(f"  other agent work (final diff, ...)  {s['agent_other_s']:8.1f} s  {f['agent_other_s']:6.1%}")
    print(f"  sandbox start/tools/close           {s['sandbox_s']:8.1f} s  {f['sandbox_s']:6.1%}")
    print(f"  waiting for a slot, grading, rest   {s['waiting_s']:8.1f} s  {f['waiting_s']:6.1%}")


def busy_s(requests: list[dict]) -> float:
    """Length of the union of the requests' [submit, reply] intervals: time with at least one generation pending."""
    total, end = 0.0, float("-inf")
    for r in sorted(requests, key=lambda r: r["t0"]):
        if r["t1"] > end:
            total += r["t1"] - max(r["t0"], end)
            end = r["t1"]
    return total


def by_turn(requests: list[dict]) -> list[list[dict]]:
    turns = defaultdict(list)
    for r in requests:
        turns[r["turn"]].append(r)
    return [turns[k] for k in sorted(turns)]


def engine_baseline(engine: HFEngine, groups: list[list[dict]]) -> tuple[int, float, list[float]]:
    """Every turn's exact prompts and token counts, all submitted at once, no stop tokens."""
    tokens, walls = 0, []
    for group in groups:
        reqs = [GenerationRequest(request_id=f"base-{i}", prompt_ids=r["prompt_ids"], max_new_tokens=r["n"], seed=r["seed"])
                for i, r in enumerate(group)]
        t = time.perf_counter()
        tokens += sum(len(g.token_ids) for g in asyncio.run(_gather(engine, reqs)))
        walls.append(time.perf_counter() - t)
    return tokens, sum(walls), walls


def generate_baseline(model, pad_id: int, groups: list[list[dict]]) -> tuple[int, float]:
    """The same prompts with transformers' model.generate: batched, sampled, left-padded, unbiased settings."""
    tokens, wall = 0, 0.0
    for group in groups:
        width = max(len(r["prompt_ids"]) for r in group)
        new = max(r["n"] for r in group)
        ids = torch.full((len(group), width), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, r in enumerate(group):
            p = r["prompt_ids"]
            ids[row, width - len(p):] = torch.tensor(p)
            mask[row, width - len(p):] = 1
        t = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 min_p=None, repetition_penalty=1.0, max_new_tokens=new, min_new_tokens=new,
                                 pad_token_id=pad_id)
        wall += time.perf_counter() - t
        tokens += (out.shape[1] - width) * len(group)
    return tokens, wall


def throughput_scenario(args, tasks, images, model_dir: Path, chat, work: Path, run_id: str) -> dict:
    keep = {} if args.kv_keep_tokens is None else {"kv_keep_tokens": args.kv_keep_tokens}
    engine = HFEngine(HFEngineConfig(model=model_dir, device="cpu", max_batch_size=max(64, args.batch),
                                     torch_threads=args.engine_threads, **keep))
    warm = [GenerationRequest(f"warmup-{i}", warmup_prompt(chat, 900 + 40 * i), args.new_tokens) for i in range(args.batch)]
    asyncio.run(_gather(engine, warm))
    # first turns held until every sandbox is up: the trajectories then generate together, at the raw run's batch
    # (otherwise sandbox starts stagger them by ~1 s, and the engine runs half-empty batches: a sandbox cost, not a generation one)
    probe = Probe(engine, hold=0 if args.stagger else args.batch)
    batch, batch_images = replicate(tasks, images, args.batch)
    config = RolloutConfig(grade=False, seed=0, sampler=SamplerConfig(
        concurrency=args.batch,
        agent=AgentConfig(max_turns=args.turns, max_new_tokens=args.new_tokens, max_format_errors=args.turns),
        sandbox=DockerSandboxConfig(run_id=run_id)),
    )
    stats0 = dict(engine.stats)
    summary, trajs, wall = run(batch, batch_images, probe, chat, config, work / "store-tiny")
    stats = {k: engine.stats[k] - stats0[k] if k != "max_batch" else engine.stats[k] for k in engine.stats}
    reap(run_id)
    tokens = summary.action_tokens
    window = max(r["t1"] for r in probe.requests) - min(r["t0"] for r in probe.requests)
    busy = busy_s(probe.requests)
    in_flight = sum(r["t1"] - r["t0"] for r in probe.requests) / busy
    groups = by_turn(probe.requests)

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    pad_id = model.config.pad_token_id or 0
    generate_baseline(model, pad_id, groups[:1])  # warm-up
    # interleaved, so that both baselines see the same background load
    raw0 = dict(engine.stats)
    runs = [(engine_baseline(engine, groups), generate_baseline(model, pad_id, groups)) for _ in range(args.repeats)]
    raw_stats = {k: (engine.stats[k] - raw0[k]) / args.repeats for k in engine.stats if k != "max_batch"}
    eng_tokens, eng_wall = runs[0][0][0], statistics.median(e[1] for e, _ in runs)
    eng_turns = [statistics.median(e[2][k] for e, _ in runs) for k in range(len(groups))]
    turns = [{"turn": k, "arrivals_spread_s": max(r["t0"] for r in g) - min(r["t0"] for r in g),
              "span_s": max(r["t1"] for r in g) - min(r["t0"] for r in g), "raw_engine_s": eng_turns[k]}
             for k, g in enumerate(groups)]
    gen_tokens, gen_wall = runs[0][1][0], statistics.median(g[1] for _, g in runs)
    engine.close()
    del model

    prompt_lens = [len(r["prompt_ids"]) for r in probe.requests]
    return {
        "batch": args.batch, "turns": args.turns, "new_tokens": args.new_tokens,
        "exit_reasons": summary.exit_reasons, "requests": len(probe.requests),
        "mean_prompt_tokens": statistics.mean(prompt_lens), "max_prompt_tokens": max(prompt_lens),
        "action_tokens": tokens, "rollout_wall_s": wall, "generation_window_s": window,
        "generation_busy_s": busy, "per_turn": turns, "mean_in_flight": in_flight,
        "rollout_tok_s": tokens / wall, "window_tok_s": tokens / window, "busy_tok_s": tokens / busy,
        "timeline": [{k: round(r[k] - probe.requests[0]["t0"], 3) if k in ("t0", "t1") else r[k]
                      for k in ("trajectory", "turn", "n", "t0", "t1")}
                     | {"prompt_tokens": len(r["prompt_ids"])} for r in probe.requests],
        "engine_stats": stats, "raw_engine_stats": raw_stats,
        "engine_baseline": {"tokens": eng_tokens, "wall_s": eng_wall, "tok_s": eng_tokens / eng_wall,
                            "walls": [e[1] for e, _ in runs]},
        "generate_baseline": {"tokens": gen_tokens, "wall_s": gen_wall, "tok_s": gen_tokens / gen_wall,
                              "walls": [g[1] for _, g in runs]},
        "split": split(trajs, wall),
    }


def warmup_prompt(chat: ChatFormat, length: int) -> list[int]:
    """A chat prompt of about ``length`` tokens, to warm the engine up on realistic shapes."""
    ids = chat.prompt_ids("You are a helpful assistant.", "Say something. " * length)
    return ids[:length]


async def _gather(engine, requests: list[GenerationRequest]) -> list:
    return await asyncio.gather(*(engine.generate(r) for r in requests))


def scripted_scenario(args, tasks, images, tokenizer, chat, work: Path, run_id: str) -> dict:
    batch, batch_images = replicate(tasks, images, args.batch)
    scripts = {t.instance_id: script_from_patch(t.patch) for t in batch}
    engine = ScriptedEngine(tokenizer, scripts, stop_token_ids=chat.stop_token_ids)
    config = RolloutConfig(grade=False, seed=0, sampler=SamplerConfig(concurrency=args.batch, agent=AgentConfig(max_turns=40),
                                                                      sandbox=DockerSandboxConfig(run_id=run_id)))
    summary, trajs, wall = run(batch, batch_images, engine, chat, config, work / "store-scripted")
    reap(run_id)
    return {"exit_reasons": summary.exit_reasons, "turns": sum(t.num_turns for t in trajs),
            "commands": sum(1 for t in trajs for turn in t.turns if turn.environment_s > 0), "split": split(trajs, wall)}


def peak_attempt(n: int, tasks, images, model_dir: Path, chat, work: Path, run_id: str) -> dict:
    engine = HFEngine(HFEngineConfig(model=model_dir, device="cpu", max_batch_size=max(64, n)))
    probe = Probe(engine, hold=n)
    batch, batch_images = replicate(tasks, images, n)
    config = RolloutConfig(grade=False, seed=0, sampler=SamplerConfig(
        concurrency=n, agent=AgentConfig(max_turns=2, max_new_tokens=32, max_format_errors=2),
        sandbox=DockerSandboxConfig(memory="256m", cpus=0.5, run_id=run_id)))
    sampler = MemorySampler(run_id)
    sampler.start()
    t0 = time.monotonic()
    try:
        summary, trajs, wall = run(batch, batch_images, probe, chat, config, work / f"store-peak-{n}")
    finally:
        mem = sampler.finish()
        reap(run_id)
        engine.close()
    errors = [t.error for t in trajs if t.error]
    return {"requested": n, "started": n - sum(1 for e in errors if e.startswith("sandbox start failed")),
            "errors": sorted(set(e[:300] for e in errors)), "exit_reasons": summary.exit_reasons,
            "wall_s": time.monotonic() - t0, "held_s": probe.held_s,
            "all_sandboxes_up_s": probe.last_arrival - probe.created, "engine_max_batch": engine.stats["max_batch"],
            "memory": mem}


def peak_scenario(args, tasks, images, model_dir: Path, chat, work: Path, run_id: str) -> dict:
    attempts = [peak_attempt(args.peak_trajectories, tasks, images, model_dir, chat, work, run_id)]
    if attempts[0]["started"] < args.peak_trajectories and attempts[0]["started"] > 0:
        attempts.append(peak_attempt(attempts[0]["started"], tasks, images, model_dir, chat, work, run_id))
    ok = [a for a in attempts if a["started"] == a["requested"]]
    return {"attempts": attempts, "largest_ok": max((a["requested"] for a in ok), default=0)}


def print_peak(p: dict) -> None:
    for a in p["attempts"]:
        m = a["memory"]
        base, peak = m["base"], m["peak"]
        print(f"{a['requested']} trajectories requested, {a['started']} sandboxes started, {peak['containers']} containers alive at "
              f"once, engine batch up to {a['engine_max_batch']}; run {a['wall_s']:.1f} s, the last sandbox was up after "
              f"{a['all_sandboxes_up_s']:.1f} s (first turns held until then); exits {a['exit_reasons']}")
        for e in a["errors"]:
            print(f"  error: {e}")
        print(f"  python process RSS       base {base['process_rss'] / MIB:8.1f} MiB  peak {peak['process_rss'] / MIB:8.1f} MiB"
              f"  (+{(peak['process_rss'] - base['process_rss']) / MIB:.1f})")
        print(f"  containers' memory (sum over the run's containers, cgroup v1): peak usage {peak['containers_usage'] / MIB:.1f} MiB "
              f"(incl. page cache; rss alone {peak['containers_rss'] / MIB:.1f} MiB); sum of per-container peaks "
              f"{m['container_max_sum'] / MIB:.1f} MiB")
        print(f"  their containerd shims RSS (host side, outside the cgroups): peak {peak['shims_rss'] / MIB:.1f} MiB; "
              f"dockerd + containerd RSS base {base['daemons_rss'] / MIB:.1f} MiB, peak {peak['daemons_rss'] / MIB:.1f} MiB")
        print(f"  system used memory       base {base['system_used'] / MIB:8.1f} MiB  peak {peak['system_used'] / MIB:8.1f} MiB"
              f"  (+{(peak['system_used'] - base['system_used']) / MIB:.1f}; includes whatever else runs on the host)")
    if p["largest_ok"] < p["attempts"][0]["requested"]:
        print(f"  largest count that started completely: {p['largest_ok']}")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--peak-trajectories", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="baseline repetitions (median wall)")
    ap.add_argument("--torch-threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    ap.add_argument("--engine-threads", type=int, default=1,
                    help="HFEngineConfig.torch_threads of the throughput scenario's engine (1, as deployments set it beside sandboxes)")
    ap.add_argument("--stagger", action="store_true",
                    help="let first turns start as their sandboxes come up (default: held until all are up, so the batch is the raw run's)")
    ap.add_argument("--kv-keep-tokens", type=int, default=None,
                    help="the engine's kv_keep_tokens in the throughput scenario (default: the config's; 0: every turn prefills its whole prompt)")
    ap.add_argument("--throughput-only", action="store_true", help="run the throughput scenario only (no scripted split, no peak memory)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    work = Path(tempfile.mkdtemp(prefix="swerl-bench-rollout-"))
    run_id = f"bench-rollout-{uuid.uuid4().hex[:8]}"
    demo = materialize_demo(work / "demo")
    tasks = load_tasks(demo.tasks_file).tasks
    outcomes = ImageBuilder(ImageConfig(repos=demo.repos_dir, build_logs=work / "builds")).build_all(tasks)
    images = {o.instance_id: o.image for o in outcomes if o.ok}
    tasks = [t for t in tasks if t.instance_id in images]
    model_dir = init_tiny(work / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    chat = ChatFormat(tokenizer)
    results: dict = {"command": " ".join(["bench/bench_rollout.py", *sys.argv[1:]]), "torch_threads": torch.get_num_threads(),
                     "cpus": os.cpu_count(), "load_average_start": os.getloadavg()}
    print(f"# swerl rollout benchmarks ({len(tasks)} demo tasks, tiny policy, CPU x{os.cpu_count()}, "
          f"torch threads {torch.get_num_threads()}, load average {load()})\n")
    try:
        tp = throughput_scenario(args, tasks, images, model_dir, chat, work, run_id)
        results["throughput"] = tp
        eng, gen = tp["engine_baseline"], tp["generate_baseline"]
        print(f"## generation throughput: {tp['batch']} concurrent tiny-model trajectories x {tp['turns']} turns x "
              f"{tp['new_tokens']} new tokens (prompts {tp['mean_prompt_tokens']:.0f} tokens on average, max {tp['max_prompt_tokens']})")
        print(f"exits {tp['exit_reasons']}; engine: {tp['engine_stats']['forward_passes']} forward passes, "
              f"{tp['engine_stats']['prefill_tokens']} prefill ({tp['engine_stats']['reused_tokens']} more reused from kept KV) + "
              f"{tp['engine_stats']['decode_tokens']} decode tokens, max batch "
              f"{tp['engine_stats']['max_batch']}")
        es, rs = tp["engine_stats"], tp["raw_engine_stats"]
        print(f"engine worker: rollout prefill {es['prefill_s']:.2f} s + merge {es['merge_s']:.2f} s + decode {es['decode_s']:.2f} s; "
              f"raw prefill {rs['prefill_s']:.2f} s ({rs['prefill_tokens']:.0f} tokens) + merge {rs['merge_s']:.2f} s + "
              f"decode {rs['decode_s']:.2f} s ({rs['forward_passes']:.0f} passes)")
        print(f"rollout, end to end      {tp['action_tokens']:6d} action tokens / {tp['rollout_wall_s']:6.2f} s wall = "
              f"{tp['rollout_tok_s']:8.1f} tok/s   ratio vs raw HFEngine = {tp['rollout_tok_s'] / eng['tok_s']:.2f}x")
        print(f"rollout, generating     {tp['action_tokens']:6d} action tokens / {tp['generation_busy_s']:6.2f} s with a request "
              f"pending ({tp['mean_in_flight']:.1f} in flight on average) = {tp['busy_tok_s']:8.1f} tok/s   ratio vs raw HFEngine = "
              f"{tp['busy_tok_s'] / eng['tok_s']:.2f}x")
        print(f"raw HFEngine batch       {eng['tokens']:6d} tokens / {eng['wall_s']:6.2f} s = {eng['tok_s']:8.1f} tok/s "
              f"(same prompts and counts, each turn's {tp['batch']} requests at once)")
        print(f"model.generate batch     {gen['tokens']:6d} tokens / {gen['wall_s']:6.2f} s = {gen['tok_s']:8.1f} tok/s   "
              f"ratio HFEngine/model.generate = {eng['tok_s'] / gen['tok_s']:.2f}x")
        for t in tp["per_turn"]:
            print(f"  turn {t['turn']}: rollout {t['span_s']:6.2f} s (requests arrived over {t['arrivals_spread_s']:5.2f} s)  "
                  f"raw HFEngine {t['raw_engine_s']:6.2f} s")
        spread = ", ".join(f"{min(b['walls']):.2f}-{max(b['walls']):.2f} s" for b in (eng, gen))
        print(f"(baselines: median of {args.repeats} interleaved runs, ranges {spread}; load average now {load()})\n")
        if args.throughput_only:
            return

        sc = scripted_scenario(args, tasks, images, tokenizer, chat, work, run_id)
        results["scripted"] = sc
        print("## rollout time split (trajectory-seconds = trajectories x wall)")
        print_split("tiny model (format errors, no commands)", tp["split"])
        print_split(f"scripted gold-patch policy ({sc['turns']} turns, {sc['commands']} commands, exits {sc['exit_reasons']})",
                    sc["split"])
        print(f"(load average now {load()})\n")

        print(f"## peak memory, {args.peak_trajectories} concurrent tiny-model trajectories (256m sandboxes, 2 turns x 32 tokens)")
        pk = peak_scenario(args, tasks, images, model_dir, chat, work, run_id)
        results["peak"] = pk
        print_peak(pk)
        results["process_max_rss_lifetime_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        results["load_average_end"] = os.getloadavg()
        print(f"  (python process lifetime max RSS, all scenarios: {results['process_max_rss_lifetime_mib']:.1f} MiB)")
        print(f"\nload average at the end: {load()} (other jobs on this host make every figure noisy; compare ratios, not absolutes)")
    finally:
        reap(run_id)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
