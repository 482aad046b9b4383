"""Fixtures for flow tests: a real Prefect API (the test harness's temporary server) and a
small slice of the demo task set, so a whole pipeline runs in minutes on 2 cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# short demo tasks: the scripted policy solves each in 4 to 5 turns
SLICE = ("swerl-demo__eventbus-1", "swerl-demo__pagekit-1", "swerl-demo__ledger-1")


@pytest.fixture(scope="session")
def prefect_api():
    """A temporary Prefect server for the session; yields its API URL (subprocesses use it too)."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield PREFECT_API_URL.value()


@pytest.fixture(scope="session")
def task_slice(demo, tmp_path_factory) -> Path:
    """A task file with three of the demo tasks (their repositories are in ``demo.repos_dir``)."""
    out = tmp_path_factory.mktemp("slice") / "tasks.jsonl"
    lines = [line for line in demo.tasks_file.read_text().splitlines() if json.loads(line)["instance_id"] in SLICE]
    assert len(lines) == len(SLICE)
    out.write_text("\n".join(lines) + "\n")
    return out
