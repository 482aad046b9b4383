"""The ``swerl`` command line. Every command is listed here, in ``COMMANDS``; its module holds only the function.

Each command module imports its heavy dependencies inside the function, so ``swerl --help`` stays fast.
"""

from __future__ import annotations

import sys

import typer

from swerl.cli import (curriculum, demo_swebench, follow, grading, housekeeping, images, model, pipeline, rollout, services,
                       train)

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Train software-engineering agents with RL.")

# command groups, in the order `swerl --help` shows them
GROUPS = {
    "tasks": "Task sets: validation.",
    "images": "Environment images: build, list, prune.",
    "demo": "The embedded demo tasks.",
    "sandbox": "Sandbox housekeeping.",
    "model": "Policies: make a tiny default model.",
    "train": "Train the policy on stored trajectories: rft (rejection fine-tuning) or dapo (one RL update).",
    "pipeline": "The whole loop: images, RFT, DAPO iterations, evaluations.",
    "curriculum": "Generated one-bug tasks: warmup, train and held-out splits.",
}

# (group or None for a top-level command, name, function)
COMMANDS = [
    ("images", "build", images.images_build),
    ("images", "list", images.images_list),
    ("images", "prune", images.images_prune),
    ("tasks", "validate", grading.tasks_validate),
    (None, "grade", grading.grade),
    ("demo", "materialize", housekeeping.demo_materialize),
    ("demo", "swebench", demo_swebench.demo_swebench),
    ("sandbox", "reap", housekeeping.sandbox_reap),
    ("model", "init-tiny", model.init_tiny_cmd),
    ("model", "ship", model.ship_cmd),
    (None, "rollout", rollout.rollout_cmd),
    (None, "eval", rollout.eval_cmd),
    ("train", "rft", train.rft),
    ("train", "dapo", train.dapo),
    ("pipeline", "run", pipeline.run),
    ("pipeline", "start", pipeline.start),
    (None, "follow", follow.follow_cmd),
    ("curriculum", "generate", curriculum.generate),
    (None, "up", services.up_command),
    (None, "down", services.down_command),
    (None, "status", services.status_command),
]


def _register() -> None:
    groups = {name: typer.Typer(no_args_is_help=True, help=help) for name, help in GROUPS.items()}
    for name, group in groups.items():
        app.add_typer(group, name=name)
    for group, name, fn in COMMANDS:
        (groups[group] if group else app).command(name)(fn)


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
