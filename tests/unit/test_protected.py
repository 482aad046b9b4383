"""Which diff sections grading refuses to apply: decided per task, from what its tests are."""

import pytest

from swerl.data.task import Task
from swerl.grading.diffs import split_diff
from swerl.grading.path_rules import config_reason, new_top_level_module, path_reason
from swerl.grading.protected import ProtectedPathsConfig, command_paths, filter_sections, task_scope

RULES = ProtectedPathsConfig().model_dump()


def section(path: str, new: bool = True, mode: str = "100644") -> str:
    return (f"diff --git a/{path} b/{path}\nnew file mode {mode}\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"
            if new else f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n")


def task(test_files: list[str], command: str = "pytest -rA", f2p: list[str] | None = None) -> tuple[Task, dict]:
    test_patch = "".join(section(p, new=False) for p in test_files)
    t = make_task(test_patch, f2p)
    return t, task_scope(t, f"{command} {' '.join(test_files)}", ProtectedPathsConfig())


def make_task(test_patch: str, f2p: list[str] | None = None) -> Task:
    return Task(instance_id="o__r-1", repo="o/r", base_commit="0" * 40, problem_statement="x", patch="",
                test_patch=test_patch, FAIL_TO_PASS=f2p or ["t"], PASS_TO_PASS=[],
                install_config={"python": "3.11", "test_cmd": "pytest -rA", "log_parser": "parse_log_pytest"})


# (repository, a test file of the task, a library file its gold patch changes): real SWE-bench layouts
REAL_GOLD_PATHS = [
    ("pytest-dev/pytest", "testing/test_terminal.py", "src/_pytest/terminal.py"),
    ("pytest-dev/pytest", "testing/python/collect.py", "src/_pytest/python.py"),
    ("pytest-dev/pytest", "testing/test_pytester.py", "src/_pytest/pytester.py"),
    ("django/django", "tests/test_utils/tests.py", "django/test/testcases.py"),
    ("django/django", "tests/test_client/tests.py", "django/test/client.py"),
    ("sympy/sympy", "sympy/testing/tests/test_pytest.py", "sympy/testing/pytest.py"),
    ("sympy/sympy", "sympy/testing/tests/test_runtests.py", "sympy/testing/runtests.py"),
    ("sympy/sympy", "sympy/utilities/tests/test_pytest.py", "sympy/utilities/pytest.py"),
    ("matplotlib/matplotlib", "lib/matplotlib/tests/test_testing.py", "lib/matplotlib/testing/decorators.py"),
    ("matplotlib/matplotlib", "lib/matplotlib/tests/test_testing.py", "lib/matplotlib/testing/conftest.py"),
    ("sphinx-doc/sphinx", "tests/test_build_html.py", "sphinx/testing/fixtures.py"),
    ("astropy/astropy", "astropy/tests/tests/test_run_tests.py", "astropy/tests/helper.py"),
    ("swerl-demo/textkit", "tests/test_slug.py", "textkit/testing/fixtures.py"),
]


@pytest.mark.parametrize("repo,test_file,gold_file", REAL_GOLD_PATHS, ids=[g for _, _, g in REAL_GOLD_PATHS])
def test_library_code_in_folders_named_like_tests_is_the_fix_s_to_change(repo, test_file, gold_file):
    t, scope = task([test_file])
    kept, dropped = filter_sections(split_diff(section(gold_file, new=False)), scope, ProtectedPathsConfig())
    assert dropped == {} and [s.path for s in kept] == [gold_file]


def test_the_folder_holding_the_task_s_tests_is_protected_with_everything_in_it():
    _, scope = task(["tests/unit/test_core.py"])
    assert scope["test_dirs"] == ["tests"]
    for path in ("tests/unit/test_core.py", "tests/unit/helpers.py", "tests/data/expected.json", "tests/conftest.py"):
        assert path_reason(path, scope, RULES) is not None, path
    assert path_reason("tests/data/expected.json", scope, RULES) == "file is in tests/ that holds the task's tests"


def test_the_nearest_test_named_folder_is_the_tests_own():
    _, scope = task(["sympy/testing/tests/test_pytest.py"])
    assert scope["test_dirs"] == ["sympy/testing/tests"]
    assert path_reason("sympy/testing/tests/helper.py", scope, RULES) is not None
    assert path_reason("sympy/testing/pytest.py", scope, RULES) is None


def test_conftest_is_protected_where_pytest_loads_it_for_the_task_s_tests():
    _, scope = task(["pkg/sub/test_x.py"])  # tests beside the code: no test folder
    assert scope["test_dirs"] == []
    for folder in ("", "pkg/", "pkg/sub/"):
        assert path_reason(f"{folder}conftest.py", scope, RULES) == "pytest loads this conftest.py for the task's tests"
    assert path_reason("pkg/other/conftest.py", scope, RULES) is None  # pytest never reaches it
    assert path_reason("pkg/sub/core.py", scope, RULES) is None  # the code beside the tests is the fix's
    listed = task_scope(make_task("", ["pkg/sub/test_y.py::test_a"]), "pytest -rA pkg/sub/test_y.py", ProtectedPathsConfig())
    assert path_reason("pkg/sub/test_y.py", listed, RULES) == ("file is one of the task's test files "
                                                                 "(named by its tests or its test command)")


def test_a_command_that_collects_whole_folders_protects_every_test_module_and_conftest():
    scope = task_scope(make_task(""), "pytest -rA", ProtectedPathsConfig())
    assert scope["collection_wide"] is True
    assert path_reason("anywhere/test_new.py", scope, RULES) == "file is a test module of a test command that collects whole folders"
    assert path_reason("anywhere/conftest.py", scope, RULES) == "pytest loads this conftest.py for the task's tests"


def test_the_test_command_s_own_script_and_folders_are_tests():
    assert command_paths("./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 admin_views.tests") == (
        ["tests/runtests.py"], False)
    assert command_paths("PYTHONWARNINGS='ignore' bin/test -C --verbose sympy/core/tests/test_basic.py") == (
        ["bin/test", "sympy/core/tests/test_basic.py"], False)
    assert command_paths("pytest -rA tests/unit") == (["tests/unit"], True)
    assert command_paths("python -m pytest /testbed/testing/test_x.py::test_a -p no:cacheprovider") == (
        ["testing/test_x.py"], False)
    _, scope = task([], command="bin/test -C sympy/core/tests/test_basic.py")
    assert path_reason("bin/test", scope, RULES) is not None


@pytest.mark.parametrize("path,reason", [
    ("sitecustomize.py", "the interpreter imports this at start-up"),
    ("usercustomize.py", "the interpreter imports this at start-up"),
    ("pkg/sitecustomize/__init__.py", "the interpreter imports this at start-up"),
    ("sitecustomize.cpython-311-x86_64-linux-gnu.so", "the interpreter imports this at start-up"),
    ("pytest.ini", "file configures the test runner or the interpreter"),
    ("pytest.toml", "file configures the test runner or the interpreter"),
    (".pytest.toml", "file configures the test runner or the interpreter"),
    (".coveragerc", "file configures the test runner or the interpreter"),
    ("pkg.egg-info/entry_points.txt", "file configures the test runner or the interpreter"),
    ("evil.egg-info/PKG-INFO", "packaging metadata can register plugins the test runner loads (entry points)"),
    ("src/evil-1.0.dist-info/METADATA", "packaging metadata can register plugins the test runner loads (entry points)"),
    ("evil.egg-link", "packaging metadata can register plugins the test runner loads (entry points)"),
    ("evil.pth", "the interpreter loads this at start-up or instead of the source (start-up hook, bytecode)"),
    ("pkg/__pycache__/core.cpython-311.pyc", "the interpreter loads this at start-up or instead of the source (start-up hook, bytecode)"),
    ("../outside.py", "path '../outside.py' leaves the repository or touches .git"),
    (".git/hooks/pre-commit", "path '.git/hooks/pre-commit' leaves the repository or touches .git"),
])
def test_runner_and_interpreter_hooks_are_dropped_wherever_they_are(path, reason):
    _, scope = task(["tests/test_x.py"])
    kept, dropped = filter_sections(split_diff(section(path)), scope, ProtectedPathsConfig())
    assert kept == [] and dropped == {path: reason}


def test_configuration_files_are_judged_by_their_sections_in_the_container():
    _, scope = task(["tests/test_x.py"])
    for name in ("setup.cfg", "tox.ini", "pyproject.toml"):
        assert path_reason(name, scope, RULES) is None


def test_files_of_the_test_patch_are_dropped_wherever_they_are():
    _, scope = task(["docs/spec.txt"])
    kept, dropped = filter_sections(split_diff(section("docs/spec.txt", new=False)), scope, ProtectedPathsConfig())
    assert dropped == {"docs/spec.txt": "file is changed by the task's test patch"}


def test_symlinks_are_dropped():
    _, scope = task(["tests/test_x.py"])
    kept, dropped = filter_sections(split_diff(section("pkg/link.py", mode="120000")), scope, ProtectedPathsConfig())
    assert dropped == {"pkg/link.py": "creates a symbolic link"}


def test_source_files_are_kept():
    _, scope = task(["tests/test_x.py"])
    diff = section("pkg/core.py", new=False) + section("pkg/util/latest.py") + section("eventbus_compat.py")
    kept, dropped = filter_sections(split_diff(diff), scope, ProtectedPathsConfig())
    assert [s.path for s in kept] == ["pkg/core.py", "pkg/util/latest.py", "eventbus_compat.py"] and dropped == {}


def test_a_new_top_level_module_is_named_by_what_it_adds_at_an_import_root():
    before = {"pkg/__init__.py", "src/lib/__init__.py"}
    assert new_top_level_module("eventbus_compat.py", before) == "eventbus_compat"
    assert new_top_level_module("src/six.py", before) == "six"
    assert new_top_level_module("_pytest/__init__.py", before) == "_pytest"
    assert new_top_level_module("pkg/new.py", before) is None  # inside a package that existed
    assert new_top_level_module("src/lib/new.py", before) is None
    assert new_top_level_module("docs/notes.txt", before) is None


PYPROJECT = """[project]
name = "x"
dependencies = ["a"]

[tool.pytest.ini_options]
markers = [
  ["x"]
]
testpaths = ["tests"]
"""


@pytest.mark.parametrize("change,reason", [
    (("[\"a\"]", "[\"a\", \"b>=2\"]"), None),
    (("[\"a\"]", "[\"a\", \"pytest>=7\", \"pytest-plugin-x\", \"coverage\"]"), None),  # values are dependencies
    (("[\"a\"]", "[\n  \"a\",\n  \"pytest-entrypoint-tools\",\n]"), None),
    (("[project]", "[project.optional-dependencies]\ntest = [\"pytest\", \"pytest-cov\"]\n\n[project]"), None),
    (("name = \"x\"", "name = \"x\"\nversion = \"2.0\""), None),
    (("[project]", "[tool.black]\nline-length = 100\n\n[project]"), None),
    (("[project]\n", "[project]\ndescription = \"\"\"\n[tool.black]\n\"\"\"\n"), None),
    (("testpaths = [\"tests\"]", "testpaths = [\"tests\"]\naddopts = \"-p evil\""),
     "it changes the [tool.pytest.ini_options] section, which configures the test run, a plugin or the build"),
    (("  [\"x\"]\n]", "  [\"x\"]\n]\npython_files = [\"*.py\"]"),  # after a row that looks like a header
     "it changes the [tool.pytest.ini_options] section, which configures the test run, a plugin or the build"),
    (("[project]", "[tool.\"pytest\".ini_options]\naddopts = \"-p evil\"\n[project]"),
     "it changes the [tool.\"pytest\".ini_options] section, which configures the test run, a plugin or the build"),
    (("[project]", "tool.pytest.ini_options.addopts = \"-p evil\"\n[project]"),
     "it changes tool.pytest.ini_options.addopts, which configures the test run, a plugin or the build"),
    (("[project]", "tool = {pytest = {ini_options = {addopts = \"-p evil\"}}}\n[project]"),
     "it changes tool, which configures the test run, a plugin or the build"),
    (("dependencies = [\"a\"]", "dependencies = [\"a\", \"pytest>=7\", \"pytest-plugin-x\"]\nentry-points = {}"),
     "it changes project.entry-points, which configures the test run, a plugin or the build"),
    (("[project]", "[project.entry-points.pytest11]\nevil = \"evil\"\n[project]"),
     "it changes the [project.entry-points.pytest11] section, which configures the test run, a plugin or the build"),
    (("dependencies = [\"a\"]", "dependencies = [\"a\"]\n\"\\u0065ntry-points\" = {}"),
     "it changes a key spelled with an escape, which may spell a protected one"),
    (("name = \"x\"", "name = \"x\"\n  entry-points = {pytest11 = {e = \"evil\"}}"),  # an indented TOML key
     "it changes project.entry-points, which configures the test run, a plugin or the build"),
    (("[project]", "[build-system]\nbuild-backend = \"evil\"\nbackend-path = [\".\"]\n[project]"),
     "it changes the [build-system] section, which configures the test run, a plugin or the build"),
])
def test_pyproject_changes_outside_the_test_run_sections_stand(change, reason):
    old, new = change
    assert old in PYPROJECT
    assert config_reason(PYPROJECT, PYPROJECT.replace(old, new, 1)) == reason


def test_setup_cfg_dependencies_may_change_and_its_pytest_section_may_not():
    base = "[metadata]\nname = x\n[options]\ninstall_requires =\n    a\n[tool:pytest]\naddopts = -q\n"
    assert config_reason(base, base.replace("    a\n", "    a\n    b\n    pytest-plugin-x\n"), toml=False) is None
    assert config_reason(base, base.replace("[tool:pytest]", "[options.extras_require]\ntesting = pytest\n[tool:pytest]"), toml=False) is None
    assert config_reason(base, base.replace("[options]", "[options]\nentry_points =\n    pytest11 = e = evil"), toml=False) == (
        "it changes options.entry_points, which configures the test run, a plugin or the build")
    assert config_reason(base, base + "  -p evil\n", toml=False) == ("it changes the [tool:pytest] section, which configures the "
                                                         "test run, a plugin or the build")
    assert config_reason(base, base + "[coverage:run]\nplugins = evil\n", toml=False) is not None
    assert config_reason("[tox]\nenvlist = py\n", "[tox]\nenvlist = py\n[pytest]\naddopts = -p evil\n", toml=False) is not None


def test_validation_fails_a_task_whose_gold_patch_a_rule_drops():
    from swerl.grading.results import GradeResult
    from swerl.grading.validate import verdict

    t = make_task("")
    gold = GradeResult(instance_id=t.instance_id, resolved=False, failure_class="tests_failed",
                       dropped_files={"conftest.py": "pytest loads this conftest.py for the task's tests"})
    empty = GradeResult(instance_id=t.instance_id, resolved=False, failure_class="no_patch")
    v = verdict(t, "img", [gold], empty)
    assert v.valid is False and v.gold_dropped == {"conftest.py": "pytest loads this conftest.py for the task's tests"}
    assert v.reason.startswith("swerl's protection rules drop files the gold patch changes, so they would fail the "
                               "real fix: conftest.py: pytest loads this conftest.py for the task's tests")


def test_names_the_environment_provides_include_what_start_up_files_import(tmp_path):
    from swerl.grading.path_rules import _startup_imports, provided_names

    pth = tmp_path / "distutils-precedence.pth"
    pth.write_text("import os; var = 'X'; enabled = os.environ.get(var, 'local') == 'local'; "
                   "enabled and __import__('_distutils_hack').add_shim();\n")
    custom = tmp_path / "sitecustomize.py"
    custom.write_text("try:\n    import apport_python_hook\nexcept ImportError:\n    pass\nfrom vendor_hook.sub import x\n"
                      "import a.b as c, d\n")
    assert _startup_imports(str(pth)) == {"os", "_distutils_hack"}
    assert _startup_imports(str(custom)) == {"apport_python_hook", "vendor_hook", "a", "d"}
    names = provided_names()
    # the standard library, what pytest imports when present, and this interpreter's site-packages
    assert {"os", "json", "pygments", "_pytest"} <= names and "eventbus_compat" not in names
