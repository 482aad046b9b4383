"""Specification of swerl.data.loaders: reading task files of every format, and reporting bad records."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swerl.data.loaders import RecordError, TaskLoadError, TaskSet, load_tasks, save_tasks
from swerl.data.task import Task

COMMIT = "a091fab020ac26548250c907bae0855273a98778"


def rec(n: int, **changes) -> dict:
    record = {
        "instance_id": f"octo__demo-{n}",
        "repo": "octo/demo",
        "base_commit": COMMIT,
        "FAIL_TO_PASS": [f"tests/test_demo.py::test_fix_{n}"],
        "PASS_TO_PASS": ["tests/test_demo.py::test_ok"],
        "install_config": {"python": "3.11"},
    }
    record.update(changes)
    return record


def write_jsonl(path, *rows) -> str:
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in rows))
    return str(path)


def ids(task_set: TaskSet) -> list[str]:
    return [t.instance_id for t in task_set.tasks]


# --- formats -------------------------------------------------------------------------


def test_jsonl_gives_one_task_per_line_and_skips_blank_lines(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1), "\n", "   \n", rec(2))
    task_set = load_tasks(path)
    assert ids(task_set) == ["octo__demo-1", "octo__demo-2"]
    assert task_set.errors == []
    assert task_set.source == path


def test_gzipped_jsonl_is_read_like_jsonl(tmp_path):
    path = tmp_path / "tasks.jsonl.gz"
    path.write_bytes(gzip.compress((json.dumps(rec(1)) + "\n" + json.dumps(rec(2)) + "\n").encode()))
    assert ids(load_tasks(path)) == ["octo__demo-1", "octo__demo-2"]


def test_json_list_of_records(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([rec(1), rec(2)]))
    assert ids(load_tasks(path)) == ["octo__demo-1", "octo__demo-2"]


@pytest.mark.parametrize("key", ["data", "instances", "tasks"])
def test_json_object_with_the_records_under_a_known_key(tmp_path, key):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"version": 2, key: [rec(1)]}))
    assert ids(load_tasks(path)) == ["octo__demo-1"]


def test_json_object_without_a_record_list_is_an_error_naming_its_keys(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"version": 2, "rows": [rec(1)]}))
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert str(caught.value) == (
        f"{path} holds a JSON object without a list of tasks under any of 'data', 'instances', 'tasks' "
        "(its keys: rows, version); write a list of task records, or one of those keys"
    )


def test_parquet_with_list_columns(tmp_path):
    path = tmp_path / "tasks.parquet"
    table = pa.table(
        {
            "instance_id": ["octo__demo-1", "octo__demo-2"],
            "repo": ["octo/demo", "octo/demo"],
            "base_commit": [COMMIT, COMMIT],
            "FAIL_TO_PASS": [["tests/test_demo.py::test_a"], ["tests/test_demo.py::test_b", "tests/test_demo.py::test_c"]],
            "PASS_TO_PASS": [[], ["tests/test_demo.py::test_ok"]],
            "install_config": [{"python": "3.9", "install": "pip install -e ."}, {"python": "3.12", "install": None}],
        }
    )
    pq.write_table(table, path)
    tasks = load_tasks(path).tasks
    assert [t.FAIL_TO_PASS for t in tasks] == [
        ["tests/test_demo.py::test_a"],
        ["tests/test_demo.py::test_b", "tests/test_demo.py::test_c"],
    ]
    assert [t.PASS_TO_PASS for t in tasks] == [[], ["tests/test_demo.py::test_ok"]]
    assert [(t.install_config.python, t.install_config.install) for t in tasks] == [("3.9", "pip install -e ."), ("3.12", "")]


def test_parquet_with_json_string_columns_as_swe_bench_publishes(tmp_path):
    path = tmp_path / "swe-bench.parquet"
    table = pa.table(
        {
            "instance_id": ["octo__demo-1"],
            "repo": ["octo/demo"],
            "base_commit": [COMMIT],
            "FAIL_TO_PASS": ['["tests/test_demo.py::test_a"]'],
            "PASS_TO_PASS": ['["tests/test_demo.py::test_ok"]'],
            "version": ["1.3"],
            "image": ["swebench/sweb.eval.x86_64.octo_1776_demo-1:latest"],
            "eval_script": ["#!/bin/bash\nset -uxo pipefail\n: '>>>>> Start Test Output'\npytest -rA\n: '>>>>> End Test Output'\n"],
            "log_parser": ["parse_log_pytest"],
            "eval_type": ["pass_and_fail"],
            "image_assets": ["{}"],
        }
    )
    pq.write_table(table, path)
    (task,) = load_tasks(path).tasks
    assert (task.FAIL_TO_PASS, task.PASS_TO_PASS, task.version, task.prebuilt_image, task.image_assets) == (
        ["tests/test_demo.py::test_a"],
        ["tests/test_demo.py::test_ok"],
        "1.3",
        "swebench/sweb.eval.x86_64.octo_1776_demo-1:latest",
        {},
    )


def test_a_pre_5_swe_bench_record_is_refused_naming_its_row_and_the_fix(tmp_path):
    path = tmp_path / "swe-bench-old.parquet"
    pq.write_table(pa.table({"instance_id": ["octo__demo-1"], "repo": ["octo/demo"], "base_commit": [COMMIT],
                             "FAIL_TO_PASS": ['["t.py::a"]'], "version": ["1.3"]}), path)
    with pytest.raises(TaskLoadError) as e:
        load_tasks(path)
    assert "row 1 (instance_id=octo__demo-1): install_config: missing, and the record has no eval_script either" in str(e.value)
    task_set = load_tasks(path, skip_invalid=True)
    assert (task_set.tasks, [err.location for err in task_set.errors]) == ([], ["row 1"])


def test_hugging_face_dataset_saved_to_disk(tmp_path):
    import datasets

    records = [rec(1, install_config={"python": "3.9", "install": "pip install -e ."}), rec(2, install_config={"python": "3.10", "install": ""})]
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "ds"))
    tasks = load_tasks(tmp_path / "ds").tasks
    assert [(t.instance_id, t.install_config.python) for t in tasks] == [("octo__demo-1", "3.9"), ("octo__demo-2", "3.10")]


@pytest.fixture
def dataset_dict_dir(tmp_path):
    import datasets

    splits = {"train": datasets.Dataset.from_list([rec(1), rec(2)]), "test": datasets.Dataset.from_list([rec(3)])}
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "dd"))
    return tmp_path / "dd"


def test_a_dataset_dict_split_is_chosen_with_split(dataset_dict_dir):
    assert ids(load_tasks(dataset_dict_dir, split="test")) == ["octo__demo-3"]
    assert ids(load_tasks(dataset_dict_dir, split="train")) == ["octo__demo-1", "octo__demo-2"]


def test_a_dataset_dict_with_several_splits_and_none_chosen_is_an_error_listing_them(dataset_dict_dir):
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(dataset_dict_dir)
    assert str(caught.value) == f"{dataset_dict_dir} holds several splits (test, train); choose one with split= (--split)"


def test_an_unknown_split_is_an_error_listing_the_splits(dataset_dict_dir):
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(dataset_dict_dir, split="validation")
    assert str(caught.value) == f"{dataset_dict_dir} has no split 'validation'; its splits are: test, train"


def test_a_dataset_dict_with_a_single_split_needs_no_split(tmp_path):
    import datasets

    datasets.DatasetDict({"test": datasets.Dataset.from_list([rec(1)])}).save_to_disk(str(tmp_path / "dd"))
    assert ids(load_tasks(tmp_path / "dd")) == ["octo__demo-1"]


def test_a_split_for_a_jsonl_file_is_an_error(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1))
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path, split="test")
    assert str(caught.value) == (
        f"split='test' was given, but {path} is not a Hugging Face DatasetDict directory; splits only exist there, so drop the split"
    )


# --- bad records ---------------------------------------------------------------------


def test_a_malformed_jsonl_line_is_reported_by_line_number(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1), '{"instance_id": "octo__demo-2" "repo": "octo/demo"}\n', rec(3))
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert caught.value.errors == [RecordError(path, "line 2", None, None, "not valid JSON: Expecting ',' delimiter at column 32")]
    assert str(caught.value.errors[0]) == f"{path} line 2: not valid JSON: Expecting ',' delimiter at column 32"


def test_a_jsonl_line_cut_short_is_reported_as_ending_early(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1), '{"instance_id": "octo__demo-2", \n')
    task_set = load_tasks(path, skip_invalid=True)
    assert [str(e) for e in task_set.errors] == [
        f"{path} line 2: not valid JSON: Expecting property name enclosed in double quotes at the end of the line"
    ]


def test_a_missing_field_is_reported_with_the_instance_id_and_field(tmp_path):
    broken = rec(2)
    del broken["repo"]
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1), broken)
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert [str(e) for e in caught.value.errors] == [f"{path} line 2 (instance_id=octo__demo-2): repo: required field is missing"]


def test_a_mistyped_field_is_reported_with_the_instance_id_and_field(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1, FAIL_TO_PASS="tests/t.py::a", install_config={"python": 3.1}))
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert caught.value.errors == [
        RecordError(path, "line 1", "octo__demo-1", "install_config.python", "python must be a string like '3.11', got the number 3.1")
    ]


def test_a_type_error_message_shows_the_value_found(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1, problem_statement=["not", "text"]))
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert [str(e) for e in caught.value.errors] == [
        f"{path} line 1 (instance_id=octo__demo-1): problem_statement: Input should be a valid string, got ['not', 'text']"
    ]


def test_every_problem_of_a_record_is_reported(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1, repo="demo", base_commit="HEAD", FAIL_TO_PASS=[]))
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert [(e.field, e.message) for e in caught.value.errors] == [
        ("repo", "repo must be 'owner/name', got 'demo'"),
        ("base_commit", "base_commit must be a hex commit id of 7-40 characters, got 'HEAD'"),
        ("FAIL_TO_PASS", "FAIL_TO_PASS is empty: a task needs at least one test that the fix makes pass"),
    ]


def test_a_record_that_is_not_an_object_is_an_error(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1), '["octo__demo-2"]\n')
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert [str(e) for e in caught.value.errors] == [f"{path} line 2: expected a JSON object (a task record), got a list"]


def test_json_records_are_located_by_record_number_and_parquet_rows_by_row(tmp_path):
    json_path = tmp_path / "tasks.json"
    json_path.write_text(json.dumps([rec(1), rec(2, base_commit="HEAD")]))
    parquet_path = tmp_path / "tasks.parquet"
    pq.write_table(pa.table({"instance_id": ["octo__demo-1", "octo__demo-2"], "repo": ["octo/demo", "demo"], "base_commit": [COMMIT, COMMIT], "FAIL_TO_PASS": [["t::a"], ["t::b"]], "install_config": ['{}', '{}']}), parquet_path)
    assert [e.location for e in load_tasks(json_path, skip_invalid=True).errors] == ["record 2"]
    assert [e.location for e in load_tasks(parquet_path, skip_invalid=True).errors] == ["row 2"]


def test_skip_invalid_returns_the_valid_tasks_and_the_errors(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1), "{oops\n", rec(3, repo="demo"), rec(4))
    task_set = load_tasks(path, skip_invalid=True)
    assert ids(task_set) == ["octo__demo-1", "octo__demo-4"]
    assert [(e.location, e.instance_id, e.field) for e in task_set.errors] == [("line 2", None, None), ("line 3", "octo__demo-3", "repo")]
    assert list(task_set.by_id()) == ["octo__demo-1", "octo__demo-4"]


def test_skip_invalid_with_no_valid_task_returns_an_empty_set(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1, repo="demo"))
    task_set = load_tasks(path, skip_invalid=True)
    assert (task_set.tasks, len(task_set.errors)) == ([], 1)


def test_a_duplicate_instance_id_is_an_error_naming_the_first_location(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", rec(1), rec(2), rec(1, problem_statement="again"))
    task_set = load_tasks(path, skip_invalid=True)
    assert ids(task_set) == ["octo__demo-1", "octo__demo-2"]
    assert task_set.tasks[0].problem_statement == ""
    assert [str(e) for e in task_set.errors] == [f"{path} line 3 (instance_id=octo__demo-1): instance_id: duplicate instance_id: first seen at line 1"]


def test_the_load_error_lists_every_problem_and_ends_with_the_hint(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", "{oops\n", rec(2, repo="demo"))
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert str(caught.value) == "\n".join(
        [
            f"2 problems in {path}:",
            f"  {path} line 1: not valid JSON: Expecting property name enclosed in double quotes at column 2",
            f"  {path} line 2 (instance_id=octo__demo-2): repo: repo must be 'owner/name', got 'demo'",
            "fix the records or pass --skip-invalid to load the valid ones",
        ]
    )


def test_the_load_error_lists_at_most_50_problems(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", *["{oops\n"] * 53)
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    message_lines = str(caught.value).splitlines()
    assert len(caught.value.errors) == 53
    assert message_lines[0] == f"53 problems in {path}:"
    assert message_lines[50] == f"  {path} line 50: not valid JSON: Expecting property name enclosed in double quotes at column 2"
    assert message_lines[51:] == ["  ... and 3 more", "fix the records or pass --skip-invalid to load the valid ones"]


# --- files ---------------------------------------------------------------------------


def test_a_missing_file_is_a_clear_error(tmp_path):
    path = tmp_path / "nope.jsonl"
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert str(caught.value) == f"task file not found: {path} (check the path and the working directory)"
    assert caught.value.errors == []


def test_an_unknown_extension_lists_the_supported_formats(tmp_path):
    path = tmp_path / "tasks.csv"
    path.write_text("instance_id,repo\n")
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(path)
    assert str(caught.value) == (
        f"cannot tell the format of {path} from its name; supported formats: "
        ".jsonl, .jsonl.gz, .json, .parquet, a directory written by datasets' save_to_disk"
    )


def test_a_directory_that_is_not_a_saved_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path} is a directory but not a Hugging Face dataset written by save_to_disk "
        "(it has neither dataset_dict.json nor state.json); pass a task file or a saved dataset"
    )


def test_a_corrupt_parquet_file_is_a_load_error_naming_the_file(tmp_path):
    path = tmp_path / "tasks.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(TaskLoadError, match=rf"^cannot read {path} as parquet: ArrowInvalid: "):
        load_tasks(path)


# --- saving --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["out/tasks.jsonl", "out/tasks.jsonl.gz", "out/tasks.parquet"])
def test_saved_tasks_load_back_equal(tmp_path, name):
    tasks = [
        Task.model_validate(rec(1, install_config={"python": "3.9", "pip_packages": ["pytest"]}, license_name="MIT")),
        Task.model_validate(rec(2, PASS_TO_PASS=[], docker_image="swerebench/sweb.eval.x86_64.octo_1776_demo-2")),
    ]
    path = save_tasks(tasks, tmp_path / name)
    assert load_tasks(path).tasks == tasks


def test_saved_jsonl_has_one_record_per_line(tmp_path):
    task = Task.model_validate(rec(1))
    path = save_tasks([task], tmp_path / "tasks.jsonl")
    assert [json.loads(line) for line in path.read_text().splitlines()] == [task.to_record()]


def test_saving_to_an_unknown_extension_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"^cannot save tasks to .*tasks\.csv: use a name ending in \.jsonl, \.jsonl\.gz or \.parquet$"):
        save_tasks([], tmp_path / "tasks.csv")
