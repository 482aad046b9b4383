"""swerl's pytest plugin, run for real by pytest in a subprocess: its events down a pipe, its canaries for
pytest functions and unittest methods, and what a pass-forcing hook does to them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

from swerl.grading.evidence import report_from_events
from swerl.grading.judge import flipped_canaries
from tests.support.payloads import FORCE_PASS

TESTS = textwrap.dedent("""\
    import unittest

    import pytest


    class TestUnit(unittest.TestCase):
        def test_a(self):
            self.assertEqual(1, 1)


    def test_b():
        assert 1 == 2


    @pytest.mark.parametrize("n", [1, 2, 3])
    def test_c(n):
        assert n > 0
    """)



def run_plugin(project: Path, canaries: dict | None) -> dict:
    plugin_dir = project.parent / "plugin"
    plugin_dir.mkdir(exist_ok=True)
    (plugin_dir / "swerl_report_t1.py").write_bytes(
        resources.files("swerl.grading").joinpath("resources/swerl_pytest_report.py").read_bytes())
    read, write = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(plugin_dir), "SWERL_REPORT_FD": str(write), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    if canaries:
        env["SWERL_CANARY_TARGETS"] = json.dumps(canaries)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "swerl_report_t1", "-p", "no:cacheprovider", "-q",
                             str(project)], cwd=project, env=env, pass_fds=(write,), stdout=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        raw = pipe.read()
    proc.wait(timeout=60)
    return report_from_events(raw)


def project_with(tmp_path: Path, **files: str) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    for name, text in files.items():
        (project / name).write_text(text)
    return project


def test_outcomes_and_a_clean_finish_come_down_the_pipe(tmp_path):
    report = run_plugin(project_with(tmp_path, **{"test_mod.py": TESTS}), None)
    assert report == {
        "complete": True, "exitstatus": 1, "canaries": {"must_fail": [], "must_pass": []}, "collect_errors": [],
        "tests": {"test_mod.py::TestUnit::test_a": "PASSED", "test_mod.py::test_b": "FAILED",
                  "test_mod.py::test_c[1]": "PASSED", "test_mod.py::test_c[2]": "PASSED", "test_mod.py::test_c[3]": "PASSED"},
    }


def test_canaries_copy_pytest_functions_and_unittest_methods_named_like_them(tmp_path):
    report = run_plugin(project_with(tmp_path, **{"test_mod.py": TESTS}),
                        {"names": ["test_a", "test_b", "test_c"], "suffix": "abc123"})
    assert report["canaries"] == {
        "must_fail": ["test_mod.py::TestUnit::test_a_abc123", "test_mod.py::test_b_abc123",
                      "test_mod.py::test_c_abc123[1]", "test_mod.py::test_c_abc123[2]"],
        "must_pass": ["test_mod.py::TestUnit::test_a_321cba", "test_mod.py::test_b_321cba",
                      "test_mod.py::test_c_321cba[1]", "test_mod.py::test_c_321cba[2]"],
    }
    tests = report["tests"]
    assert {n: tests[n] for n in report["canaries"]["must_fail"]} == dict.fromkeys(report["canaries"]["must_fail"], "FAILED")
    assert {n: tests[n] for n in report["canaries"]["must_pass"]} == dict.fromkeys(report["canaries"]["must_pass"], "PASSED")
    assert flipped_canaries(report) == []


def test_a_pass_forcing_hook_flips_the_must_fail_copies_of_both_kinds(tmp_path):
    report = run_plugin(project_with(tmp_path, **{"test_mod.py": TESTS, "conftest.py": FORCE_PASS}),
                        {"names": ["test_a", "test_b"], "suffix": "abc123"})
    assert report["tests"]["test_mod.py::test_b"] == "PASSED"  # the hook fooled pytest itself
    assert [p.split(" ")[1] for p in flipped_canaries(report)] == ["test_mod.py::TestUnit::test_a_abc123",
                                                                   "test_mod.py::test_b_abc123"]
