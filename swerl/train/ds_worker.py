"""Train on batch files in a process of its own; the entry point for torchrun and the deepspeed launcher.

    torchrun --nproc_per_node 2 -m swerl.train.ds_worker --model DIR --config trainer.json \\
        --out RUN/checkpoints RUN/batches/000.pt RUN/batches/001.pt ...

Each process reads the same batch files (``TrainBatch.save``) and takes its share of each
step's micro-batches. After step k the checkpoint ``OUT/step-<k>`` is written (atomically)
with ``data_position = {"next_batch": k}``; with ``--resume`` a restarted run continues from
the latest complete checkpoint, so a killed run loses at most the step in flight. Rank 0
appends each step's metrics to ``OUT/metrics.jsonl``. The config's ``backend`` picks the
trainer (``torch`` runs one process).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from swerl.train import TrainBatch, TrainerConfig, latest_checkpoint, make_trainer, step_dir


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m swerl.train.ds_worker", description=__doc__.split("\n\n")[0])
    p.add_argument("batches", nargs="+", type=Path, help="TrainBatch files, one per optimiser step, in order")
    p.add_argument("--model", required=True, help="model folder (or hub name) to start from")
    p.add_argument("--config", type=Path, help="TrainerConfig as JSON (default: the paper's DAPO settings, torch backend)")
    p.add_argument("--out", required=True, type=Path, help="checkpoint root: OUT/step-000001, ...")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint under OUT, if any")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = TrainerConfig.model_validate_json(args.config.read_text()) if args.config else TrainerConfig()
    trainer = make_trainer(args.model, config)
    rank = getattr(trainer, "rank", 0)
    start = 0
    latest = latest_checkpoint(args.out) if args.resume else None
    if latest is not None:
        start = trainer.load(latest).data_position["next_batch"]
    for i in range(start, len(args.batches)):
        metrics = trainer.train_step(TrainBatch.load(args.batches[i]))
        trainer.save(step_dir(args.out, trainer.step), iteration=i + 1, data_position={"next_batch": i + 1})
        if rank == 0:
            with (args.out / "metrics.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps({"batch": i, **metrics}) + "\n")
    trainer.close()
    return 0


def shutdown(code: int) -> None:
    """Leave the process group cleanly, then exit without C++ static teardown.

    Under torchrun a rank sometimes aborted at interpreter exit ("terminate called without
    an active exception": a communication thread destroyed unjoined) after all its work was
    saved. Every output is written atomically before this point, so skipping teardown loses
    nothing and turns a spurious SIGABRT into the real exit code.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        multi = dist.get_world_size() > 1
        dist.barrier()
        dist.destroy_process_group()
        if multi:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    shutdown(main())
