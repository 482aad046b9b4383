"""swerl's pytest plugin and root's canaries, run for real by pytest in a subprocess: the plugin's events down
a pipe, the canaries written into the test file for pytest functions and unittest methods, and what a
pass-forcing hook, a deselecting hook and emptied test bodies do to them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

from swerl.grading.evidence import report_from_events
from swerl.grading.canaries import build
from swerl.grading.judge import canary_problems
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



def run_plugin(project: Path) -> dict:
    plugin_dir = project.parent / "plugin"
    plugin_dir.mkdir(exist_ok=True)
    (plugin_dir / "swerl_report_t1.py").write_bytes(
        resources.files("swerl.grading").joinpath("resources/swerl_pytest_report.py").read_bytes())
    read, write = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(plugin_dir), "SWERL_REPORT_FD": str(write), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTEST_ADDOPTS", None)
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


TARGETS = ["test_mod.py::TestUnit::test_a", "test_mod.py::test_b", "test_mod.py::test_c[1]"]


def test_outcomes_runs_and_a_clean_finish_come_down_the_pipe(tmp_path):
    report = run_plugin(project_with(tmp_path, **{"test_mod.py": TESTS}))
    ids = ["test_mod.py::TestUnit::test_a", "test_mod.py::test_b", "test_mod.py::test_c[1]", "test_mod.py::test_c[2]",
           "test_mod.py::test_c[3]"]
    assert report == {
        "complete": True, "exitstatus": 1, "collect_errors": [], "sessions": 1, "runs": dict.fromkeys(ids, 1),
        "tests": {"test_mod.py::TestUnit::test_a": "PASSED", "test_mod.py::test_b": "FAILED",
                  "test_mod.py::test_c[1]": "PASSED", "test_mod.py::test_c[2]": "PASSED", "test_mod.py::test_c[3]": "PASSED"},
        "hooks": [],
    }


def test_the_outcome_hooks_of_the_project_are_listed_by_file_and_function(tmp_path):
    helpers = "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef forced(item, call):\n    yield\n"
    project = project_with(tmp_path, **{"test_mod.py": TESTS, "helpers.py": helpers,
                                        # a star import registers whatever hooks the library module defines
                                        "conftest.py": "from helpers import *  # noqa\n"
                                                       "pytest_runtest_makereport = forced\n"
                                                       "def pytest_configure(config):\n    pass\n"})
    report = run_plugin(project)
    # pytest_configure does not choose, run or report tests; the environment's own plugins are left out
    assert report["hooks"] == [["pytest_runtest_makereport", str(project / "helpers.py"), "forced"]]


def test_a_conftest_that_rewrites_the_plugin_s_names_or_the_builtins_hides_no_hook(tmp_path):
    # what the listing reads was bound as the plugin was imported: its module's names and builtins' are anyone's (the
    # fake getattr breaks pytest itself here, after collection: the listing is what is checked)
    helpers = "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef forced(item, call):\n    yield\n"
    blind = ("import builtins, sys\n"
             "plugin = sys.modules['swerl_report_t1']\n"
             "plugin.OUTCOME_HOOKS = ()\n"
             "plugin.__file__ = __file__.replace('conftest.py', 'helpers.py')\n"
             "plugin.MAX_LINE = 0\n"
             "real_getattr = builtins.getattr\n"
             "def fake_getattr(obj, name, *default):\n"
             "    return None if name == 'pytest_runtest_makereport' else real_getattr(obj, name, *default)\n"
             "builtins.getattr = fake_getattr\n"
             "real_len = builtins.len\n"
             "def fake_len(obj):  # the listing's rows look empty\n"
             "    return 0 if type(obj) is list and obj and type(obj[0]) is list else real_len(obj)\n"
             "builtins.len = fake_len\n"
             "from helpers import *  # noqa\n"
             "pytest_runtest_makereport = forced\n")
    project = project_with(tmp_path, **{"test_mod.py": TESTS, "helpers.py": helpers, "conftest.py": blind})
    report = run_plugin(project)
    assert report["hooks"] == [["pytest_runtest_makereport", str(project / "helpers.py"), "forced"]]


def test_a_conftest_that_replaces_json_s_encoder_forges_no_outcome(tmp_path):
    # the plugin writes its JSON itself: the json module's encoder is state a conftest may replace
    forge = ("import json\n"
             "class Forged(json.JSONEncoder):\n"
             "    def encode(self, o):\n"
             "        return super().encode(o).replace('FAILED', 'PASSED')\n"
             "json._default_encoder = Forged()\n"
             "json.encoder.c_make_encoder = None\n")
    report = run_plugin(project_with(tmp_path, **{"test_mod.py": TESTS, "conftest.py": forge}))
    assert report["tests"]["test_mod.py::test_b"] == "FAILED"
    assert report["exitstatus"] == 1 and report["complete"] is True


def test_root_writes_canaries_beside_pytest_functions_and_unittest_methods(tmp_path):
    project = project_with(tmp_path, **{"test_mod.py": TESTS})
    built = build(str(project), TARGETS, seed=7)
    assert built["not_built"] == {}
    assert sorted(b["test"] for b in built["built"]) == sorted(TARGETS)
    for entry in built["built"]:
        scope = entry["test"].split("[")[0].rsplit("::", 1)[0]
        name = entry["test"].split("[")[0].rsplit("::", 1)[1]
        for kind in ("must_fail", "must_pass"):  # same file and class, the real name and a word
            assert entry[kind].rsplit("::", 1)[0] == scope and entry[kind].rsplit("::", 1)[1].startswith(name + "_")
    report = run_plugin(project)
    must_fail = [b["must_fail"] for b in built["built"]]
    fails = {n: s for n, s in report["tests"].items() if n.split("[")[0] in must_fail}
    passes = {n: s for n, s in report["tests"].items() if n.split("[")[0] in [b["must_pass"] for b in built["built"]]}
    assert len(fails) == len(passes) == 5 and set(fails.values()) == {"FAILED"} and set(passes.values()) == {"PASSED"}
    assert canary_problems(report, built["built"]) == []
    assert "__wrapped__" not in (project / "test_mod.py").read_text() and "SWERL" not in (project / "test_mod.py").read_text()


def test_a_pass_forcing_hook_flips_the_must_fail_copies_of_both_kinds(tmp_path):
    project = project_with(tmp_path, **{"test_mod.py": TESTS, "conftest.py": FORCE_PASS})
    built = build(str(project), TARGETS[:2], seed=7)["built"]
    report = run_plugin(project)
    assert report["tests"]["test_mod.py::test_b"] == "PASSED"  # the hook fooled pytest itself
    assert [p.split(" ")[1] for p in canary_problems(report, built)] == [b["must_fail"] for b in built]


# an autouse fixture that swaps every other test function's code for an empty one before it runs
EMPTY_BODIES = textwrap.dedent("""\
    import pytest


    def _empty(*args, **kwargs):
        return None


    @pytest.fixture(autouse=True)
    def _swap(request):
        fn = getattr(request.function, "__func__", request.function)
        fn.__code__ = _empty.__code__.replace(co_name=fn.__code__.co_name)
    """)

DESELECT_EXTRA_COPIES = textwrap.dedent("""\
    def pytest_collection_modifyitems(items):
        names = [i.originalname for i in items]
        # drop any function whose name extends another's: what a payload guessing at copies would do
        items[:] = [i for i in items if not any(i.originalname.startswith(n + "_") for n in names)]
    """)


def test_emptied_test_bodies_empty_the_must_fail_copies_too(tmp_path):
    project = project_with(tmp_path, **{"test_mod.py": TESTS, "conftest.py": EMPTY_BODIES})
    built = build(str(project), ["test_mod.py::test_b"], seed=7)["built"]
    report = run_plugin(project)
    assert report["tests"]["test_mod.py::test_b"] == "PASSED"  # the real test's body never ran
    assert [p.split(" ")[1] for p in canary_problems(report, built)] == [built[0]["must_fail"]]


def test_copies_removed_from_the_run_are_missing_evidence(tmp_path):
    project = project_with(tmp_path, **{"test_mod.py": TESTS, "conftest.py": DESELECT_EXTRA_COPIES})
    built = build(str(project), ["test_mod.py::test_b"], seed=7)["built"]
    report = run_plugin(project)
    problems = canary_problems(report, built)
    assert [p.split(" ")[1] for p in problems] == [built[0]["must_fail"], built[0]["must_pass"]]
    assert all("never ran" in p for p in problems)
