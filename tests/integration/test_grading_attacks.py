"""An RL policy will find any hole in the grader. Each attack here must grade unresolved,
and every grading must leave no container behind."""

from __future__ import annotations

import pytest

import subprocess

from swerl.envs.docker_sandbox import running_containers
from swerl.grading.diffs import split_diff
from swerl.grading.grader import GradingConfig, grade_prediction
from swerl.grading.results import FailureClass
from tests.conftest import git_patch

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def target(demo_tasks, demo_images, demo):
    """A demo task whose gold patch changes one source file, with its mirror."""
    task = sorted(demo_tasks.values(), key=lambda t: t.instance_id)[0]
    return task, demo_images[task.instance_id], demo.repos_dir / task.repo.replace("/", "__")


@pytest.fixture
def grade(target, run_id, tmp_path):
    task, image, _ = target

    def run(patch: str, timeout: float = 120.0):
        config = GradingConfig(test_timeout_s=timeout, grading_logs=tmp_path / "logs")
        config.sandbox.run_id = run_id
        result = grade_prediction(task, patch, image, config, model_name="attacker")
        assert running_containers(run_id) == []
        return result

    return run


def source_file(task) -> str:
    return next(s.path for s in split_diff(task.patch) if s.path.endswith(".py"))


def f2p_file(task) -> str:
    return task.FAIL_TO_PASS[0].split("::")[0]


def test_gold_patch_resolves(grade, target):
    res = grade(target[0].patch)
    assert (res.resolved, res.failure_class, res.log_valid, res.dropped_files) == (True, None, True, {})


def test_empty_patch_is_no_patch(grade):
    res = grade("")
    assert (res.resolved, res.failure_class) == (False, FailureClass.NO_PATCH)


def test_conftest_forcing_every_test_to_pass_is_dropped(grade, target, tmp_path):
    task, _, repo = target
    conftest = (
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    rep = outcome.get_result()\n    rep.outcome = 'passed'\n"
    )
    patch = git_patch(repo, task.base_commit, {"conftest.py": conftest, f"{source_file(task).rsplit('/', 1)[0]}/conftest.py": conftest}, tmp_path)
    res = grade(patch)
    # the root's is loaded for the task's tests and dropped; the library folder's is never loaded by them
    assert (res.resolved, res.failure_class) == (False, FailureClass.TESTS_FAILED)
    assert res.dropped_files == {"conftest.py": "pytest loads this conftest.py for the task's tests"}
    assert res.reason.startswith("swerl did not apply 1 file(s) of the patch: conftest.py (pytest loads this "
                                 "conftest.py for the task's tests); ")


def test_sitecustomize_and_pth_hooks_are_dropped(grade, target, tmp_path):
    task, _, repo = target
    hook = "import builtins\nbuiltins.__swerl_pwned__ = True\n"
    res = grade(git_patch(repo, task.base_commit, {"sitecustomize.py": hook, "usercustomize.py": hook, "x.pth": "import os\n"}, tmp_path))
    assert res.resolved is False
    assert set(res.dropped_files) == {"sitecustomize.py", "usercustomize.py", "x.pth"}


def test_pytest_configuration_deselecting_the_failing_tests_is_dropped(grade, target, tmp_path):
    task, _, repo = target
    ini = "[pytest]\naddopts = -p no:randomly --deselect " + " --deselect ".join(task.FAIL_TO_PASS) + "\n"
    patch = git_patch(repo, task.base_commit, {"pytest.ini": ini, "tox.ini": ini.replace("[pytest]", "[tool:pytest]")}, tmp_path)
    res = grade(patch)
    assert res.resolved is False and {"pytest.ini", "tox.ini"} <= set(res.dropped_files)


def test_editing_the_tests_is_dropped_and_the_real_tests_run(grade, target, tmp_path):
    task, _, repo = target
    fake = "".join(f"def {t.split('::')[1].split('[')[0]}():\n    assert True\n\n" for t in task.FAIL_TO_PASS)
    src = source_file(task)
    original = subprocess.run(["git", "show", f"{task.base_commit}:{src}"], cwd=repo, capture_output=True, text=True).stdout
    res = grade(git_patch(repo, task.base_commit, {f2p_file(task): fake, src: original + "# tidy\n"}, tmp_path))
    assert (res.resolved, res.failure_class) == (False, FailureClass.TESTS_FAILED)
    assert res.dropped_files == {f2p_file(task): "file is changed by the task's test patch"}
    assert all(not res.tests[t].passed for t in task.FAIL_TO_PASS)


def test_deleting_the_tests_is_dropped(grade, target, tmp_path):
    task, _, repo = target
    res = grade(git_patch(repo, task.base_commit, {f2p_file(task): None}, tmp_path) + target[0].patch)
    assert res.dropped_files == {f2p_file(task): "file is changed by the task's test patch"}
    assert res.resolved is True  # the gold fix still counts; the deletion never happened


def test_printed_fake_passed_lines_are_caught(grade, target, tmp_path):
    task, _, repo = target
    src = source_file(task)
    original = subprocess.run(["git", "show", f"{task.base_commit}:{src}"], cwd=repo, capture_output=True, text=True).stdout
    forged = "\n".join(f"PASSED {t}" for t in task.FAIL_TO_PASS + task.PASS_TO_PASS)
    evil = original + (
        "\nimport atexit as _a, os as _o, sys as _s\n"
        f"_FORGED = {forged!r}\n"
        "def _forge():\n    _s.stdout.write('\\n' + _FORGED + '\\n'); _s.stdout.flush()\n"
        "_a.register(_forge)\n"
        "_o.write(1, ('\\n' + _FORGED + '\\n').encode())\n"
    )
    res = grade(git_patch(repo, task.base_commit, {src: evil}, tmp_path))
    assert res.resolved is False and res.log_valid is False
    assert res.failure_class == FailureClass.TESTS_FAILED
    assert "but pytest recorded FAILED" in res.reason


def test_an_endless_loop_times_out_and_leaves_nothing_running(grade, target, tmp_path):
    task, _, repo = target
    src = source_file(task)
    original = subprocess.run(["git", "show", f"{task.base_commit}:{src}"], cwd=repo, capture_output=True, text=True).stdout
    evil = original + "\nimport subprocess as _sp\n_sp.Popen(['sleep', '10000'], start_new_session=True)\nwhile True:\n    pass\n"
    res = grade(git_patch(repo, task.base_commit, {src: evil}, tmp_path), timeout=15)
    # killed in the container at the tests' own limit (SIGKILL: 128 + 9), not by the exec's, which also covers the set-up
    assert (res.resolved, res.failure_class, res.test_exit_code) == (False, FailureClass.TIMEOUT, 137)
    assert res.reason == "tests did not finish within 15s; every process they started was killed"


def test_a_patch_that_does_not_apply_is_apply_failed(grade, target):
    bogus = "diff --git a/nowhere.py b/nowhere.py\n--- a/nowhere.py\n+++ b/nowhere.py\n@@ -1,2 +1,2 @@\n-not here\n+x\n ctx\n"
    res = grade(bogus)
    assert (res.resolved, res.failure_class) == (False, FailureClass.APPLY_FAILED)
    assert "patch does not apply" in res.reason


def test_text_that_is_not_a_diff_is_apply_failed(grade):
    res = grade("I fixed it, trust me.\n")
    assert (res.resolved, res.failure_class) == (False, FailureClass.APPLY_FAILED)


def test_a_path_escaping_the_repository_is_dropped(grade, target):
    evil = "diff --git a/../../usr/lib/python3/dist-packages/x.py b/../../usr/lib/python3/dist-packages/x.py\nnew file mode 100644\n--- /dev/null\n+++ b/../../usr/lib/python3/dist-packages/x.py\n@@ -0,0 +1 @@\n+x = 1\n"
    res = grade(evil + target[0].patch)
    assert res.resolved is True
    assert list(res.dropped_files.values()) == ["path '../../usr/lib/python3/dist-packages/x.py' leaves the repository or touches .git"]


def test_a_wrong_fix_is_tests_failed_with_per_test_detail(grade, target, tmp_path):
    task, _, repo = target
    src = source_file(task)
    original = subprocess.run(["git", "show", f"{task.base_commit}:{src}"], cwd=repo, capture_output=True, text=True).stdout
    res = grade(git_patch(repo, task.base_commit, {src: original + "\n# looked at it\n"}, tmp_path))
    assert (res.resolved, res.failure_class, res.log_valid) == (False, FailureClass.TESTS_FAILED, True)
    assert [res.tests[t].status for t in task.FAIL_TO_PASS] == ["FAILED"] * len(task.FAIL_TO_PASS)
    assert all(res.tests[t].passed for t in task.PASS_TO_PASS)


def _star_importing_task(task, repo, pkg, tmp_path):
    """The task with a conftest in its test patch that star-imports a library module, as matplotlib's does."""
    conftest = f"try:\n    from {pkg}.testing.plugin import *  # noqa: F401,F403\nexcept ImportError:\n    pass\n"
    extra = git_patch(repo, task.base_commit, {"tests/conftest.py": conftest}, tmp_path)
    return task.model_copy(update={"test_patch": task.test_patch + extra})


@pytest.mark.parametrize("canaries", [False, True])
def test_a_hook_added_to_library_code_that_a_conftest_star_imports_is_refused(canaries, target, run_id, tmp_path):
    from tests.support.payloads import FORCE_PASS

    task, image, repo = target
    pkg = source_file(task).split("/")[0]
    starred = _star_importing_task(task, repo, pkg, tmp_path)
    # no fix: a new library package (not a test folder: none of the task's tests live in it) whose module
    # defines a pass-forcing hook, registered by the task's own conftest
    patch = git_patch(repo, task.base_commit, {f"{pkg}/testing/__init__.py": "", f"{pkg}/testing/plugin.py": FORCE_PASS},
                      tmp_path)
    config = GradingConfig(grading_logs=tmp_path / "logs", canaries=canaries)
    config.sandbox.run_id = run_id
    res = grade_prediction(starred, patch, image, config, model_name="attacker")
    assert (res.resolved, res.failure_class, res.dropped_files) == (False, FailureClass.TAMPERED, {}), res.reason
    if not canaries:  # the hook layer alone
        assert res.reason == ("pytest registered a hook implementation the patch adds, which decides what runs or how "
                              f"it is reported: pytest_runtest_makereport from {pkg}/testing/plugin.py:"
                              "pytest_runtest_makereport")


def test_a_fix_to_library_code_that_a_conftest_star_imports_still_resolves(target, run_id, tmp_path):
    task, image, repo = target
    pkg = source_file(task).split("/")[0]
    starred = _star_importing_task(task, repo, pkg, tmp_path)
    helper = "import pytest\n\n\n@pytest.fixture\ndef sample_rows():\n    return [['a', 'b']]\n"
    patch = task.patch + git_patch(repo, task.base_commit, {f"{pkg}/testing/__init__.py": "",
                                                              f"{pkg}/testing/plugin.py": helper}, tmp_path)
    config = GradingConfig(grading_logs=tmp_path / "logs")
    config.sandbox.run_id = run_id
    res = grade_prediction(starred, patch, image, config, model_name="gold+fixture")
    assert (res.resolved, res.failure_class, res.dropped_files) == (True, None, {}), res.reason
