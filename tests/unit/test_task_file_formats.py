"""Every place that reads a task file takes JSONL, JSON and Parquet alike (``swerl.data.loaders``
picks the reader by suffix): the stages, the flows' tasks, the tiny model's corpus and the lineage
digest all see the same tasks whatever the format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swerl.data.loaders import save_tasks
from swerl.data.task import Task

FORMATS = ["tasks.jsonl", "tasks.json", "tasks.parquet"]


def task(n: int, **changes) -> Task:
    return Task(instance_id=f"o__r-{n}", repo="o/r", base_commit="a" * 40, install_config={"python": "3.11"},
                FAIL_TO_PASS=[f"t.py::test_{n}"], PASS_TO_PASS=["t.py::test_old"], problem_statement=f"bug {n}", **changes)


TASKS = [task(1), task(2, gold_statuses={"t.py::test_2": "PASSED"}), task(3)]


def write(tasks: list[Task], path: Path) -> Path:
    if path.suffix == ".json":  # save_tasks writes JSONL and Parquet; a JSON array is what other tools export
        path.write_text(json.dumps([t.to_record() for t in tasks]))
        return path
    return save_tasks(tasks, path)


@pytest.mark.parametrize("name", FORMATS)
def test_a_stage_reads_the_same_tasks_from_every_format(tmp_path, name):
    from swerl.stages.images import load_task_file

    assert load_task_file(write(TASKS, tmp_path / name)) == TASKS


@pytest.mark.parametrize("name", FORMATS)
def test_a_rollout_chunk_picks_its_tasks_from_every_format(tmp_path, name):
    from swerl.stages.rollout import RolloutStage, stage_tasks

    stage = RolloutStage(tasks=write(TASKS, tmp_path / name), model="m", out=tmp_path / "out", instance_ids=["o__r-3", "o__r-1"])
    assert [t.instance_id for t in stage_tasks(stage)] == ["o__r-1", "o__r-3"]  # file order


@pytest.mark.parametrize("name", FORMATS)
def test_the_lineage_digest_of_a_task_set_does_not_depend_on_its_format(tmp_path, name):
    from swerl.orchestration.recording import log_task_set
    from swerl.tracking.lineage import tasks_digest

    logged = []

    class Tracker:
        def log_dataset(self, run_id, **kw):
            logged.append(kw)

    digest = log_task_set(Tracker(), "run", write(TASKS, tmp_path / name), name="tasks", context="training")
    assert digest == tasks_digest(TASKS)
    assert [(d["digest"], d["profile"]) for d in logged] == [(tasks_digest(TASKS), {"tasks": 3})]


@pytest.mark.parametrize("name", FORMATS)
def test_validation_keeps_the_valid_tasks_of_every_format_as_jsonl(tmp_path, name):
    from flows.pipeline import keep_valid_tasks
    from swerl.data.loaders import load_tasks

    report = tmp_path / "validation.json"
    report.write_text(json.dumps({"tasks": [{"instance_id": "o__r-1", "valid": True}, {"instance_id": "o__r-2", "valid": False},
                                            {"instance_id": "o__r-3", "valid": True}]}))
    out = keep_valid_tasks.fn(write(TASKS, tmp_path / name), report, tmp_path / "kept.jsonl")
    assert load_tasks(out).tasks == [TASKS[0], TASKS[2]]


@pytest.mark.slow
def test_the_tiny_models_tokenizer_learns_the_same_corpus_from_parquet_as_from_jsonl(tmp_path):
    from swerl.orchestration.inputs import tiny_model

    made = {name: tiny_model(tmp_path / name, corpus_tasks=write(TASKS, tmp_path / f"corpus-{name}"))
            for name in ("tasks.jsonl", "tasks.parquet")}
    jsonl, parquet = ((made[n] / "tokenizer.json").read_bytes() for n in ("tasks.jsonl", "tasks.parquet"))
    assert jsonl == parquet
