"""The SWE task record: SWE-bench and SWE-rebench instances, accepted as published.

SWE-bench publishes FAIL_TO_PASS / PASS_TO_PASS as JSON-encoded strings; SWE-rebench and
most re-exports use real lists. Both are accepted and normalised to ``list[str]``.
Unknown fields (SWE-rebench's ``meta``, ``license_name``, ...) are kept, so a task
round-trips through swerl without losing anything.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

REPO_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
COMMIT_PATTERN = re.compile(r"^[0-9a-f]{7,40}$")

DEFAULT_PYTHON = "3.11"
# --tb=short: a collection error's traceback stays in the kept log (and in a MISSING test's reason)
DEFAULT_TEST_CMD = "pytest --no-header -rA --tb=short -p no:cacheprovider"
DEFAULT_LOG_PARSER = "parse_log_pytest"
_NO_TEST_INSTRUCTIONS = object()


def _as_str_list(value: Any, field: str) -> list[str]:
    """Accept a list of strings, a JSON-encoded list, a single string, or None."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{field} looks like a JSON list but does not parse: {e}") from e
        else:
            return [value]
    if isinstance(value, tuple):
        value = list(value)
    if hasattr(value, "tolist"):  # numpy arrays from Parquet / HF datasets
        value = value.tolist()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field} must be a list of strings (or a JSON-encoded one), got {value!r:.120}")
    return list(value)


def _json_object(value: Any, field: str) -> Any:
    """A mapping field published as an object, a JSON string, or empty (null, "")."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{field} is a string but not JSON: {e}") from e
    return value


class InstallConfig(BaseModel):
    """How to build a task's environment (SWE-rebench's ``install_config``)."""

    model_config = ConfigDict(extra="allow")

    python: str = Field(DEFAULT_PYTHON, pattern=r"^3\.\d{1,2}$", description="Python version X.Y of the environment.")
    packages: str = Field("", description="'requirements.txt', 'environment.yml', or space-separated pip requirements.")
    pip_packages: list[str] = Field(default_factory=list, description="Extra pip requirements installed in the environment.")
    pre_install: list[str] = Field(default_factory=list, description="Shell commands run before installing the repository.")
    install: str = Field("", description="Shell command, run in /testbed, that installs the repository.")
    reqs_path: list[str] = Field(default_factory=list, description="Requirement files inside the repository, installed in the instance image.")
    env_yml_path: list[str] = Field(default_factory=list, description="Conda environment files (recorded; conda is not supported by the bootstrapped base).")
    test_cmd: str = Field(DEFAULT_TEST_CMD, min_length=1, description="Command that runs the tests; test files are appended.")
    log_parser: str = Field(DEFAULT_LOG_PARSER, min_length=1, description="Name of the log parser, as in swebench's PARSER_REGISTRY.")
    eval_commands: list[str] = Field(default_factory=list, description="Shell commands run before the test command at grading time.")
    docker_specs: dict[str, Any] = Field(default_factory=dict, description="Free-form image hints (recorded).")

    @field_validator("python", mode="before")
    @classmethod
    def _python_as_text(cls, v: Any) -> Any:
        if v is None:  # Parquet / HF struct columns fill a key missing from one record with null
            return DEFAULT_PYTHON
        if isinstance(v, float):  # YAML / JSON writers turn "3.10" into 3.1
            raise ValueError(f"python must be a string like '3.11', got the number {v!r}")
        return v

    @field_validator("packages", "install", mode="before")
    @classmethod
    def _join_lists(cls, v: Any) -> Any:
        if v is None:
            return ""
        if isinstance(v, list):
            return " ".join(v)
        return v

    @field_validator("test_cmd", mode="before")
    @classmethod
    def _test_cmd_text(cls, v: Any) -> Any:
        if v is None:
            return DEFAULT_TEST_CMD
        if isinstance(v, list):
            return " && ".join(v) if len(v) > 1 else (v[0] if v else DEFAULT_TEST_CMD)
        return v

    @field_validator("log_parser", mode="before")
    @classmethod
    def _parser_default(cls, v: Any) -> Any:
        return DEFAULT_LOG_PARSER if v is None else v

    @field_validator("pip_packages", "pre_install", "reqs_path", "env_yml_path", "eval_commands", mode="before")
    @classmethod
    def _lists(cls, v: Any, info: ValidationInfo) -> list[str]:
        if isinstance(v, str) and not v.strip().startswith("["):
            # pip_packages is sometimes published space-separated
            return v.split() if info.field_name == "pip_packages" else [v]
        return _as_str_list(v, str(info.field_name))

    @field_validator("docker_specs", mode="before")
    @classmethod
    def _specs(cls, v: Any) -> Any:
        return {} if v is None else v


class Task(BaseModel):
    """One SWE instance: a repository snapshot, an issue, and the tests that judge a fix."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    instance_id: str = Field(min_length=1, max_length=300, description="Unique id, e.g. 'owner__name-1234'.")
    repo: str = Field(description="GitHub 'owner/name'.")
    base_commit: str = Field(description="Commit the agent starts from (hex, 7-40 chars).")
    patch: str = Field("", description="Gold patch (unified diff) that fixes the issue.")
    test_patch: str = Field("", description="Diff adding or changing the tests that judge the fix.")
    problem_statement: str = Field("", description="The issue text shown to the agent.")
    hints_text: str = Field("", description="Comments on the issue before the fix.")
    created_at: str | None = Field(None, description="Creation time of the fixing pull request.")
    version: str | None = Field(None, description="Release the instance belongs to (SWE-bench).")
    environment_setup_commit: str | None = Field(None, description="Commit whose dependencies the environment uses.")
    # validate_default: a missing FAIL_TO_PASS is reported against the field, like an empty one
    FAIL_TO_PASS: list[str] = Field(default_factory=list, validate_default=True, description="Tests that fail before the fix and pass after.")
    PASS_TO_PASS: list[str] = Field(default_factory=list, description="Tests that pass before and after the fix.")
    install_config: InstallConfig = Field(default_factory=InstallConfig, description="How to build the environment.")
    docker_image: str | None = Field(None, description="Prebuilt instance image; used as is when set.")
    # SWE-bench 5: the publisher's own image, test script and parser travel with the record
    image: str | None = Field(None, description="SWE-bench 5: prebuilt instance image (repository in /testbed); used as is.")
    eval_script: str | None = Field(None, description="SWE-bench 5: the publisher's bash test script, printing "
                                    "'>>>>> Start Test Output' / '>>>>> End Test Output' around the tests.")
    log_parser: str | None = Field(None, description="SWE-bench 5: parser name in swebench's PARSER_REGISTRY "
                                   "(overrides install_config.log_parser).")
    eval_type: Literal["pass_and_fail", "fail_only"] = Field(
        "pass_and_fail", description="SWE-bench 5: 'fail_only' when the parser records only failures (a listed test "
        "absent from the log passes).")
    image_assets: dict[str, Any] = Field(default_factory=dict, description="SWE-bench 5: binary files a text patch "
                                         "cannot carry, {'test_patch': [{'path', 'url'}], 'patch': [...]}.")
    gold_statuses: dict[str, str] = Field(default_factory=dict, description="swerl: the status each listed test had "
                                          "when validation ran the gold patch (XFAIL and SKIPPED count as passing only "
                                          "where the gold patch had the same status).")

    @model_validator(mode="before")
    @classmethod
    def _knows_how_to_test(cls, data: Any) -> Any:
        # SWE-bench before version 5 kept test commands in the harness's code, not in the record:
        # grading such a record with defaults tests nothing, so it is refused instead of guessed.
        # An explicit empty install_config ({}) asks for the defaults on purpose; null is a missing one.
        if isinstance(data, dict) and data.get("install_config") in (None, "") and not str(data.get("eval_script") or "").strip():
            return {**data, "install_config": _NO_TEST_INSTRUCTIONS}  # reported on the field, beside other errors
        return data

    @field_validator("instance_id")
    @classmethod
    def _id_chars(cls, v: str) -> str:
        if v != v.strip() or any(c in v for c in "/\\\n\t "):
            raise ValueError(f"instance_id must not contain whitespace or slashes, got {v!r}")
        return v

    @field_validator("repo")
    @classmethod
    def _repo_format(cls, v: str) -> str:
        # "." and ".." match the character class but would escape the directory a repo is cloned into
        if not isinstance(v, str) or not REPO_PATTERN.match(v) or any(part in (".", "..") for part in v.split("/")):
            raise ValueError(f"repo must be 'owner/name', got {v!r}")
        return v

    @field_validator("base_commit")
    @classmethod
    def _commit_format(cls, v: str) -> str:
        if not isinstance(v, str) or not COMMIT_PATTERN.match(v):
            raise ValueError(f"base_commit must be a hex commit id of 7-40 characters, got {v!r:.60}")
        return v

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _test_lists(cls, v: Any, info: ValidationInfo) -> list[str]:
        return _as_str_list(v, str(info.field_name))

    @field_validator("FAIL_TO_PASS")
    @classmethod
    def _has_tests(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("FAIL_TO_PASS is empty: a task needs at least one test that the fix makes pass")
        return v

    @field_validator("PASS_TO_PASS")
    @classmethod
    def _disjoint(cls, v: list[str], info: ValidationInfo) -> list[str]:
        overlap = set(v) & set(info.data.get("FAIL_TO_PASS") or [])
        if overlap:
            raise ValueError(f"tests listed in both FAIL_TO_PASS and PASS_TO_PASS: {sorted(overlap)[:5]}")
        return v

    @field_validator("hints_text", "problem_statement", "patch", "test_patch", mode="before")
    @classmethod
    def _none_as_empty(cls, v: Any) -> Any:
        return "" if v is None else v

    @field_validator("install_config", mode="before")
    @classmethod
    def _install_config(cls, v: Any) -> Any:
        if v is _NO_TEST_INSTRUCTIONS:
            raise ValueError(
                "missing, and the record has no eval_script either, so nothing says how to install the repository "
                "or run its tests (SWE-bench records before version 5 kept that in the harness's code); add an "
                "install_config (python, install, test_cmd, log_parser: SWE-rebench's format) or use the current "
                "SWE-bench release, whose records carry image, eval_script, log_parser and eval_type"
            )
        return _json_object(v, "install_config")

    @field_validator("image_assets", "gold_statuses", mode="before")
    @classmethod
    def _json_objects(cls, v: Any, info: ValidationInfo) -> Any:
        return _json_object(v, str(info.field_name))  # Hugging Face datasets and Parquet exports carry JSON strings

    @field_validator("eval_type", mode="before")
    @classmethod
    def _eval_type(cls, v: Any) -> Any:
        return "pass_and_fail" if v is None or v == "" else v

    @field_validator("docker_image", "image", "eval_script", "log_parser", "created_at", "version",
                     "environment_setup_commit", mode="before")
    @classmethod
    def _empty_as_none(cls, v: Any) -> Any:
        if v is None or (isinstance(v, str) and not v.strip()):
            return None
        if isinstance(v, (datetime, date)):  # Parquet / HF timestamp columns arrive as datetimes
            return v.isoformat()
        return str(v) if isinstance(v, (int, float)) else v

    @property
    def prebuilt_image(self) -> str | None:
        """The publisher's image (SWE-bench 5 ``image`` or SWE-rebench ``docker_image``), used without a build."""
        return self.image or self.docker_image

    @property
    def parser_name(self) -> str:
        """The log parser: the record's own ``log_parser`` first, then install_config's."""
        return self.log_parser or self.install_config.log_parser

    @property
    def owner_name(self) -> tuple[str, str]:
        owner, name = self.repo.split("/", 1)
        return owner, name

    def to_record(self) -> dict[str, Any]:
        """The task as a JSON-ready dict in SWE-bench field order (lists stay lists)."""
        return self.model_dump(mode="json")
