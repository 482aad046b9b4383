"""The pipeline's validated task file: valid tasks only, each with its gold patch's test statuses."""

import json

import pytest

from swerl.data.loaders import load_tasks, save_tasks
from swerl.data.task import Task


def task(n: int) -> Task:
    return Task(instance_id=f"o__r-{n}", repo="o/r", base_commit="a" * 40, install_config={},
                FAIL_TO_PASS=[f"t.py::test_{n}"], PASS_TO_PASS=["t.py::test_old"])


@pytest.mark.parametrize("name", ["tasks.jsonl", "tasks.parquet"])
def test_kept_tasks_are_the_valid_ones_with_their_gold_statuses(tmp_path, name):
    from flows.pipeline import keep_valid_tasks

    source = save_tasks([task(1), task(2), task(3)], tmp_path / name)
    report = tmp_path / "validation.json"
    report.write_text(json.dumps({"tasks": [
        {"instance_id": "o__r-1", "valid": True, "gold_statuses": {"t.py::test_1": "PASSED", "t.py::test_old": "XFAIL"}},
        {"instance_id": "o__r-2", "valid": False, "gold_statuses": {}},
        {"instance_id": "o__r-3", "valid": True},  # a verdict cached before gold statuses were recorded
    ]}))
    out = keep_valid_tasks.fn(source, report, tmp_path / "kept.jsonl")
    kept = load_tasks(out).tasks
    assert [(t.instance_id, t.gold_statuses) for t in kept] == [
        ("o__r-1", {"t.py::test_1": "PASSED", "t.py::test_old": "XFAIL"}), ("o__r-3", {})]


def test_no_valid_task_is_an_error_naming_the_report(tmp_path):
    from flows.pipeline import keep_valid_tasks

    source = save_tasks([task(1)], tmp_path / "tasks.jsonl")
    report = tmp_path / "validation.json"
    report.write_text(json.dumps({"tasks": [{"instance_id": "o__r-1", "valid": False}]}))
    with pytest.raises(ValueError, match="every task in .* failed validation; see the validation report"):
        keep_valid_tasks.fn(source, report, tmp_path / "kept.jsonl")
