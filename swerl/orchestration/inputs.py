"""The embedded default's inputs: demo tasks and repositories, the tiny starting model."""

from __future__ import annotations

from pathlib import Path

DEFAULT_DEMO_DIR = Path("runs/demo")


def demo_inputs(folder: Path = DEFAULT_DEMO_DIR) -> tuple[Path, Path]:
    """Materialise the demo tasks (idempotent) and return (tasks file, repos folder)."""
    from swerl.demo import materialize_demo

    if not (folder / "tasks.jsonl").is_file() or not (folder / "repos").is_dir():
        materialize_demo(folder)
    return folder / "tasks.jsonl", folder / "repos"


def task_inputs(tasks: Path | None, repos: Path | None, demo_dir: Path = DEFAULT_DEMO_DIR) -> tuple[Path, Path | None]:
    """The given task file and mirror, or the demo's when no task file is given."""
    if tasks is None:
        demo_tasks, demo_repos = demo_inputs(demo_dir)
        return demo_tasks, repos or demo_repos
    return Path(tasks), repos


def tiny_model(folder: Path, config=None, corpus_tasks: Path | None = None) -> Path:
    """The tiny policy in ``folder`` (created once; deterministic given ``config`` and ``corpus_tasks``).

    ``corpus_tasks``: a task file whose issue texts and patches join the tokenizer's corpus.
    """
    from swerl.models.tiny import TinyModelConfig, init_tiny

    if not (folder / "config.json").is_file():
        extra = []
        if corpus_tasks is not None:
            from swerl.data.loaders import load_tasks

            extra = [f"{t.problem_statement}\n{t.patch}\n{t.test_patch}" for t in load_tasks(corpus_tasks).tasks]
        init_tiny(folder, config or TinyModelConfig(), overwrite=True, extra_texts=extra)
    return folder


def curriculum_inputs(folder: Path, config) -> dict[str, Path]:
    """Generate the curriculum into ``folder`` once; its split files and repository mirror."""
    from swerl.curriculum.generate import generate_curriculum

    if not (folder / "curriculum.json").is_file():
        generate_curriculum(folder, config)
    return {"train": folder / "train.jsonl", "heldout": folder / "heldout.jsonl", "warmup": folder / "warmup.jsonl",
            "repos": folder / "repos"}
