"""One training stage on every process a launcher started: the entry point for torchrun and the deepspeed launcher.

    torchrun --nproc_per_node 8 -m swerl.stages.train_worker dapo STAGE.json

``STAGE.json`` is the stage as JSON (``DAPOStage`` or ``RFTStage``: ``stage.model_dump_json()``) with the DeepSpeed
backend (``train.trainer.backend: deepspeed``). Every process reads the same trajectories and plans the same steps;
ZeRO partitions the model over them, and only the first process (RANK 0) writes the run folder. The same command
resumes the run (``swerl.train.run``); an off-policy update's proximal pass runs on every process through the
partitions before the first step, and a resume reads the values the first attempt kept.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from swerl.stages.errors import StageInputError
from swerl.stages.train import DAPOStage, RFTStage, train_dapo, train_rft
from swerl.train.ds_worker import shutdown

STAGES = {"dapo": (DAPOStage, train_dapo), "rft": (RFTStage, train_rft)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m swerl.stages.train_worker", description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=sorted(STAGES), help="the stage: a DAPO update or rejection fine-tuning")
    p.add_argument("stage", type=Path, help="the stage's config as JSON (DAPOStage / RFTStage)")
    args = p.parse_args(argv)
    model, run = STAGES[args.kind]
    try:  # the input's fault: say which, no traceback
        stage = model.model_validate_json(args.stage.read_text(encoding="utf-8"))
    except OSError as e:
        print(f"cannot read the stage file: {e}", file=sys.stderr)
        return 2
    except ValidationError as e:
        print(f"{args.stage} is not a valid {model.__name__}: {e}", file=sys.stderr)
        return 2
    try:
        run(stage)
    except StageInputError as e:
        print(f"{args.stage}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    shutdown(main())
