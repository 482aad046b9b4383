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


def differing_fields(held: dict, asked: dict) -> list[str]:
    """The keys, sorted, whose values differ between a run folder's recorded config and the one asked (missing counts)."""
    return sorted(k for k in held.keys() | asked.keys() if held.get(k) != asked.get(k))


def tiny_model(folder: Path, config=None, corpus_tasks: Path | None = None) -> Path:
    """The tiny policy in ``folder`` (created once; deterministic given ``config`` and ``corpus_tasks``).

    ``corpus_tasks``: a task file whose issue texts and patches join the tokenizer's corpus.
    A folder holding a tiny model of another config or tokenizer corpus is refused (ValueError
    naming what differs): a resumed run's finished stages trained that model.
    """
    import json

    from swerl.models.tiny import MODEL_CARD, TinyModelConfig, init_tiny, tokenizer_texts
    from swerl.models.tokenizer_training import corpus_digest

    config = config or TinyModelConfig()
    extra = []
    if corpus_tasks is not None:
        from swerl.data.loaders import load_tasks

        extra = [f"{t.problem_statement}\n{t.patch}\n{t.test_patch}" for t in load_tasks(corpus_tasks).tasks]
    card = folder / MODEL_CARD
    if not (folder / "config.json").is_file() or not card.is_file():
        init_tiny(folder, config, overwrite=True, extra_texts=extra)
        return folder
    held = json.loads(card.read_text())
    asked = config.model_dump(mode="json")
    differ = [f"{k}={held['config'].get(k)!r} (asked {asked.get(k)!r})" for k in differing_fields(held["config"], asked)]
    if held["tokenizer_corpus"]["sha256"] != corpus_digest(tokenizer_texts(extra)):
        n = held["tokenizer_corpus"]["extra_texts"]
        differ.append(f"a tokenizer corpus of {n} task texts (asked "
                      + (f"{len(extra)})" if n != len(extra) else f"{n} other ones)"))
    if differ:
        raise ValueError(f"{folder} holds a tiny model made with {', '.join(differ)}; the run's finished stages trained "
                         "that model: give this model a run of its own (another name or run_root), or delete "
                         f"{folder.parent} to start the run again")
    return folder


def curriculum_inputs(folder: Path, config) -> dict[str, Path]:
    """Generate the curriculum into ``folder`` once; its split files and repository mirror.

    A folder that already holds a curriculum of another config is refused (ValueError naming the
    differing fields): a resumed run's finished stages trained and scored on those tasks, and
    going on with other ones would mix two curricula in one run without a word.
    """
    import json

    from swerl.curriculum.generate import generate_curriculum

    manifest = folder / "curriculum.json"
    if not manifest.is_file():
        generate_curriculum(folder, config)
    else:
        held = json.loads(manifest.read_text())["config"]
        asked = config.model_dump(mode="json")
        differ = differing_fields(held, asked)
        if differ:
            raise ValueError(f"{folder} holds a curriculum generated with "
                             f"{', '.join(f'{k}={held.get(k)!r}' for k in differ)}, and this run asks for "
                             f"{', '.join(f'{k}={asked.get(k)!r}' for k in differ)}; the run's finished stages used the "
                             "tasks already there: give this curriculum a run of its own (another name or run_root), "
                             f"or delete {folder.parent} to start the run again")
    return {"train": folder / "train.jsonl", "heldout": folder / "heldout.jsonl", "warmup": folder / "warmup.jsonl",
            "repos": folder / "repos"}
