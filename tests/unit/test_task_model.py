"""Specification of swerl.data.task.Task: SWE-bench and SWE-rebench records, accepted as published."""

import copy
import datetime
import json

import pytest
from pydantic import ValidationError

from swerl.data.task import DEFAULT_PYTHON, Task

# Shaped like a published nebius/SWE-rebench instance (patches shortened).
REBENCH = {
    "instance_id": "0b01001001__spectree-64",
    "repo": "0b01001001/spectree",
    "base_commit": "a091fab020ac26548250c907bae0855273a98778",
    "patch": "diff --git a/spectree/utils.py b/spectree/utils.py\n--- a/spectree/utils.py\n+++ b/spectree/utils.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n",
    "test_patch": "diff --git a/tests/test_utils.py b/tests/test_utils.py\n--- a/tests/test_utils.py\n+++ b/tests/test_utils.py\n@@ -1 +1 @@\n-a\n+b\n",
    "problem_statement": "[BUG] description for query parameters is missing\n",
    "hints_text": "",
    "created_at": "2020-10-12 12:53:51",
    "version": "0.0",
    "environment_setup_commit": "a091fab020ac26548250c907bae0855273a98778",
    "FAIL_TO_PASS": ["tests/test_utils.py::test_parse_params"],
    "PASS_TO_PASS": ["tests/test_utils.py::test_comments", "tests/test_utils.py::test_parse_code"],
    "meta": {
        "commit_name": "head_commit",
        "failed_lite_validators": ["has_many_modified_files"],
        "has_test_patch": True,
        "is_lite": False,
        "llm_score": {"difficulty_score": 1, "issue_text_score": 1, "test_score": 1},
        "num_modified_files": 2,
    },
    "install_config": {
        "env_vars": None,
        "env_yml_path": None,
        "install": "pip install -e .",
        "log_parser": "parse_log_pytest",
        "no_use_env": None,
        "packages": "requirements.txt",
        "pip_packages": ["pytest", "flask"],
        "pre_install": ["apt-get update", "apt-get install -y gcc"],
        "python": "3.9",
        "reqs_path": ["requirements.txt"],
        "test_cmd": "pytest --no-header -rA --tb=line --color=no -p no:cacheprovider -W ignore::DeprecationWarning",
        "eval_commands": ["export LANG=C.UTF-8"],
    },
    "license_name": "Apache License 2.0",
    "docker_image": "swerebench/sweb.eval.x86_64.0b01001001_1776_spectree-64",
}


def record(**changes):
    rec = copy.deepcopy(REBENCH)
    rec.update(changes)
    return rec


def install(**changes):
    config = copy.deepcopy(REBENCH["install_config"])
    config.update(changes)
    return config


def errors(rec) -> list[tuple[tuple, str]]:
    with pytest.raises(ValidationError) as caught:
        Task.model_validate(rec)
    return [(e["loc"], e["msg"]) for e in caught.value.errors()]


def test_a_published_swe_rebench_record_is_accepted_as_is():
    task = Task.model_validate(REBENCH)
    assert task.owner_name == ("0b01001001", "spectree")
    assert task.FAIL_TO_PASS == ["tests/test_utils.py::test_parse_params"]
    assert task.install_config.python == "3.9"
    assert task.install_config.packages == "requirements.txt"
    assert task.install_config.pip_packages == ["pytest", "flask"]
    assert task.install_config.pre_install == ["apt-get update", "apt-get install -y gcc"]
    assert task.install_config.install == "pip install -e ."
    assert task.install_config.reqs_path == ["requirements.txt"]
    assert task.install_config.env_yml_path == []
    assert task.install_config.log_parser == "parse_log_pytest"
    assert task.install_config.eval_commands == ["export LANG=C.UTF-8"]
    assert task.install_config.test_cmd.startswith("pytest --no-header -rA --tb=line")


def test_test_lists_are_accepted_as_json_strings_as_swe_bench_publishes_them():
    as_text = record(FAIL_TO_PASS='["tests/test_utils.py::test_parse_params"]', PASS_TO_PASS="[]")
    task = Task.model_validate(as_text)
    assert task.FAIL_TO_PASS == ["tests/test_utils.py::test_parse_params"]
    assert task.PASS_TO_PASS == []


def test_a_fail_to_pass_string_that_is_not_json_is_rejected_naming_the_field():
    assert errors(record(FAIL_TO_PASS="[not json")) == [
        (
            ("FAIL_TO_PASS",),
            "Value error, FAIL_TO_PASS looks like a JSON list but does not parse: Expecting value: line 1 column 2 (char 1)",
        )
    ]


def test_a_test_list_of_non_strings_is_rejected():
    assert errors(record(PASS_TO_PASS=[1, 2])) == [
        (("PASS_TO_PASS",), "Value error, PASS_TO_PASS must be a list of strings (or a JSON-encoded one), got [1, 2]")
    ]


@pytest.mark.parametrize("fail_to_pass", [[], "[]", ""])
def test_an_empty_fail_to_pass_is_rejected(fail_to_pass):
    assert errors(record(FAIL_TO_PASS=fail_to_pass)) == [
        (("FAIL_TO_PASS",), "Value error, FAIL_TO_PASS is empty: a task needs at least one test that the fix makes pass")
    ]


def test_a_missing_fail_to_pass_is_rejected_like_an_empty_one():
    rec = record()
    del rec["FAIL_TO_PASS"]
    assert errors(rec) == [
        (("FAIL_TO_PASS",), "Value error, FAIL_TO_PASS is empty: a task needs at least one test that the fix makes pass")
    ]


def test_a_test_in_both_fail_to_pass_and_pass_to_pass_is_rejected():
    both = "tests/test_utils.py::test_parse_params"
    assert errors(record(PASS_TO_PASS=[both])) == [
        (("PASS_TO_PASS",), f"Value error, tests listed in both FAIL_TO_PASS and PASS_TO_PASS: ['{both}']")
    ]


@pytest.mark.parametrize("repo", ["spectree", "0b01001001/spectree/extra", "owner/", "../..", "owner/..", "own er/x"])
def test_repo_must_be_owner_slash_name(repo):
    assert errors(record(repo=repo)) == [(("repo",), f"Value error, repo must be 'owner/name', got {repo!r}")]


@pytest.mark.parametrize("commit", ["HEAD", "a091fa", "A091FAB020", "a091fab020ac26548250c907bae0855273a987780", "main"])
def test_base_commit_must_be_7_to_40_lowercase_hex_characters(commit):
    assert errors(record(base_commit=commit)) == [
        (("base_commit",), f"Value error, base_commit must be a hex commit id of 7-40 characters, got {commit!r}")
    ]


def test_a_short_base_commit_is_accepted():
    assert Task.model_validate(record(base_commit="a091fab")).base_commit == "a091fab"


def test_install_config_as_a_json_string_equals_install_config_as_a_dict():
    as_text = Task.model_validate(record(install_config=json.dumps(REBENCH["install_config"])))
    assert as_text == Task.model_validate(REBENCH)


def test_install_config_that_is_a_string_but_not_json_is_rejected():
    assert errors(record(install_config="python=3.9")) == [
        (("install_config",), "Value error, install_config is a string but not JSON: Expecting value: line 1 column 1 (char 0)")
    ]


def test_python_3_10_written_as_the_number_3_1_is_rejected_rather_than_misread():
    assert errors(record(install_config=install(python=3.1))) == [
        (("install_config", "python"), "Value error, python must be a string like '3.11', got the number 3.1")
    ]


def test_python_must_be_major_dot_minor():
    assert errors(record(install_config=install(python="3.9.18"))) == [
        (("install_config", "python"), "String should match pattern '^3\\.\\d{1,2}$'")
    ]


def test_python_left_null_by_a_parquet_struct_column_means_the_default():
    assert Task.model_validate(record(install_config=install(python=None))).install_config.python == DEFAULT_PYTHON


def test_pip_packages_published_space_separated_become_a_list():
    task = Task.model_validate(record(install_config=install(pip_packages="pytest flask==2.0")))
    assert task.install_config.pip_packages == ["pytest", "flask==2.0"]


@pytest.mark.parametrize("missing", [None, "absent"])
def test_a_record_with_neither_install_config_nor_eval_script_is_refused_with_the_fix(missing):
    rec = record()
    if missing == "absent":
        del rec["install_config"]
    else:
        rec["install_config"] = None
    with pytest.raises(ValidationError) as e:
        Task.model_validate(rec)
    message = str(e.value)
    assert [err["loc"] for err in e.value.errors()] == [("install_config",)]
    assert "no eval_script either" in message
    assert "add an install_config" in message and "image, eval_script, log_parser and eval_type" in message


def test_an_explicit_empty_install_config_gets_the_defaults():
    rec = record()
    rec["install_config"] = {}
    config = Task.model_validate(rec).install_config
    assert (config.python, config.test_cmd, config.log_parser) == (
        "3.11",
        "pytest --no-header -rA --tb=short -p no:cacheprovider",
        "parse_log_pytest",
    )


def test_a_swebench_5_record_needs_no_install_config():
    rec = record()
    del rec["install_config"]
    rec.update(image="swebench/sweb.eval.x86_64.octo_1776_demo-1:latest", eval_script="#!/bin/bash\npytest -rA\n",
               log_parser="parse_log_pytest_v2", eval_type="fail_only", image_assets='{"test_patch": []}')
    task = Task.model_validate(rec)
    assert (task.prebuilt_image, task.parser_name, task.eval_type, task.image_assets) == (
        "swebench/sweb.eval.x86_64.octo_1776_demo-1:latest", "parse_log_pytest_v2", "fail_only", {"test_patch": []})


def test_an_unknown_eval_type_is_refused():
    rec = record()
    rec["eval_type"] = "pass_only"
    with pytest.raises(ValidationError, match="eval_type"):
        Task.model_validate(rec)


@pytest.mark.parametrize("image", ["", "   ", None])
def test_an_empty_docker_image_means_none(image):
    assert Task.model_validate(record(docker_image=image)).docker_image is None


def test_a_timestamp_created_at_from_parquet_becomes_iso_text():
    task = Task.model_validate(record(created_at=datetime.datetime(2020, 10, 12, 12, 53, 51)))
    assert task.created_at == "2020-10-12T12:53:51"


def test_unknown_fields_are_kept_through_to_record():
    out = Task.model_validate(REBENCH).to_record()
    assert out["meta"] == REBENCH["meta"]
    assert out["license_name"] == "Apache License 2.0"
    assert out["install_config"]["no_use_env"] is None
    assert out["install_config"]["env_vars"] is None


def test_to_record_round_trips_to_an_equal_task_and_is_json_ready():
    task = Task.model_validate(REBENCH)
    out = task.to_record()
    assert json.loads(json.dumps(out)) == out
    assert Task.model_validate(out) == task
    assert out["FAIL_TO_PASS"] == ["tests/test_utils.py::test_parse_params"]
