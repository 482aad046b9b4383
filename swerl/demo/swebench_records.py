"""A task as SWE-bench 5 publishes its records: prebuilt image, the publisher's eval script,
parser and eval type, and no install recipe.

The eval script has the shape swebench's own generator produced: it activates the conda
environment, applies the test patch and runs the tests between the ``>>>>> Start Test
Output`` / ``>>>>> End Test Output`` markers.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from swerl.data.task import Task
from swerl.demo.conda_layout import CONDA_ROOT, ENV_NAME, REPO_DIRECTORY
from swerl.grading.judge import END_TEST_OUTPUT, START_TEST_OUTPUT

# swebench's constants, spelled as its generator spelled them (swebench 4, harness/test_spec/python.py)
HEREDOC_DELIMITER = "EOF_114329324912"
TEST_CMD = "pytest -rA"
EVAL_TYPES = ("pass_and_fail", "fail_only")
EvalType = Literal["pass_and_fail", "fail_only"]

# The SWE-bench field order of a published record, then SWE-bench 5's additions.
RECORD_FIELDS = (
    "repo", "instance_id", "base_commit", "patch", "test_patch", "problem_statement", "hints_text",
    "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit",
    "image", "eval_script", "log_parser", "eval_type", "image_assets",
)  # fmt: skip


def _modified_files(patch: str) -> list[str]:
    """Files the patch changes that exist before it (swebench.utils.get_modified_files)."""
    from swebench.utils import get_modified_files

    return get_modified_files(patch)


def _test_directives(test_patch: str) -> list[str]:
    """The test patch's files minus data files (swebench's get_test_directives, for pytest repositories)."""
    from swebench.harness.constants import NON_TEST_EXTS

    return [d for d in re.findall(r"diff --git a/.* b/(.*)", test_patch) if not any(d.endswith(e) for e in NON_TEST_EXTS)]


def eval_script(task: Task, *, test_cmd: str = TEST_CMD, install: str | None = None) -> str:
    """The bash script swebench's generator wrote for a pytest repository (make_eval_script_list_py), with
    the specs' ``install`` (re-run once the prediction is in) where the repository has one."""
    base = task.base_commit
    reset_tests = f"git checkout {base} {' '.join(_modified_files(task.test_patch))}"
    lines = [
        f"source {CONDA_ROOT}/bin/activate",
        f"conda activate {ENV_NAME}",
        f"cd {REPO_DIRECTORY}",
        f"git config --global --add safe.directory {REPO_DIRECTORY}",
        f"cd {REPO_DIRECTORY}",
        "git status",
        "git show",
        f"git -c core.fileMode=false diff {base}",
        f"source {CONDA_ROOT}/bin/activate",
        f"conda activate {ENV_NAME}",
        *([install] if install else []),
        reset_tests,
        f"git apply -v - <<'{HEREDOC_DELIMITER}'\n{task.test_patch}\n{HEREDOC_DELIMITER}",
        f": '{START_TEST_OUTPUT}'",
        " ".join([test_cmd, *_test_directives(task.test_patch)]),
        f": '{END_TEST_OUTPUT}'",
        reset_tests,
    ]
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"


def _published_ids(tests: list[str], log_parser: str) -> list[str]:
    """Test ids as the parser prints them: parse_log_pytest keeps a line's second word only."""
    if log_parser not in ("parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2"):
        return list(tests)
    return list(dict.fromkeys(t.split()[0] if t.split() else t for t in tests))


def swebench_record(task: Task, image: str, *, eval_type: EvalType = "pass_and_fail",
                    log_parser: str = "parse_log_pytest") -> dict[str, Any]:
    """``task`` as a SWE-bench 5 record for ``image``: no install_config, the publisher's eval script instead.

    FAIL_TO_PASS / PASS_TO_PASS are JSON-encoded strings and image_assets is ``"{}"``, as the
    Hugging Face datasets ship them.
    """
    from swebench.harness.log_parsers import PARSER_REGISTRY

    if eval_type not in EVAL_TYPES:
        raise ValueError(f"eval_type must be one of {EVAL_TYPES}, got {eval_type!r}")
    if log_parser not in PARSER_REGISTRY:
        raise ValueError(f"log_parser {log_parser!r} is not in swebench's PARSER_REGISTRY")
    if not task.test_patch.strip():
        raise ValueError(f"task {task.instance_id} has no test patch: its eval script would run no test")
    f2p = _published_ids(task.FAIL_TO_PASS, log_parser)
    p2p = [t for t in _published_ids(task.PASS_TO_PASS, log_parser) if t not in f2p]
    values = {
        "repo": task.repo,
        "instance_id": task.instance_id,
        "base_commit": task.base_commit,
        "patch": task.patch,
        "test_patch": task.test_patch,
        "problem_statement": task.problem_statement,
        "hints_text": task.hints_text,
        "created_at": task.created_at or "",
        "version": task.version or "",
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p),
        "environment_setup_commit": task.environment_setup_commit or task.base_commit,
        "image": image,
        "eval_script": eval_script(task),
        "log_parser": log_parser,
        "eval_type": eval_type,
        "image_assets": "{}",
    }
    return {key: values[key] for key in RECORD_FIELDS}
