"""Build one curriculum task: a tiny package with one bug, its tests, patches and issue text.

The repository at ``base_commit`` holds ``<package>/__init__.py``, ``<package>/<module>.py``
(2-4 small functions, one of them buggy), ``tests/test_<module>.py`` (one passing test per
correct function: PASS_TO_PASS) and a ``pyproject.toml`` that puts the package on pytest's
path. The test patch appends 1-2 tests of the buggy function (FAIL_TO_PASS); the gold patch
restores the one line the bug kind broke.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random

from swerl.curriculum.bugs import mutate
from swerl.curriculum.execute import run_calls
from swerl.curriculum.names import NOUNS
from swerl.curriculum.patches import file_diff
from swerl.curriculum.statement import problem_statement
from swerl.curriculum.templates import TEMPLATES, Template, pool

MIN_MODULE_LINES = 8
MAX_MODULE_LINES = 20  # the file is shown twice (open, edit): keep a trajectory near 1200 tokens
_CANDIDATE_CALLS = 24  # argument draws tried when looking for calls that expose the bug
_NAME_TRIES = 50


class TaskBuildError(ValueError):
    """The drawn choices cannot make a valid task (the caller draws again)."""


@dataclass(frozen=True)
class Function:
    """One rendered function of the module."""

    template: Template
    name: str
    variables: tuple[tuple[str, str], ...]  # (placeholder, drawn name), in placeholder order
    lines: tuple[str, ...]

    def var(self, placeholder: str) -> str:
        return dict(self.variables)[placeholder]


@dataclass(frozen=True)
class GeneratedTask:
    """Everything one task is made of, before it becomes a repository and a record."""

    package: str
    module: str
    kind: str
    template: str
    function: str
    variables: tuple[str, ...]  # the buggy function's variable names, in placeholder order
    files: dict[str, str]  # the tree at base_commit: path -> text
    gold_patch: str
    test_patch: str
    problem_statement: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    fixed_line: str
    buggy_line: str

    @property
    def module_path(self) -> str:
        return f"{self.package}/{self.module}.py"

    @property
    def combination(self) -> tuple[str, str, str]:
        """What no two tasks of a curriculum share: (bug kind, template, function name).

        Keyed on the function name alone (not name plus variables), which is the stricter
        rule: a held-out task never reuses a training task's kind, body and name together.
        """
        return (self.kind, self.template, self.function)


def build_task(rng: Random, kind: str, template: Template, package: str, module: str, *,
               name_file: bool = False) -> GeneratedTask:
    """Draw names, companions and inputs with ``rng``; run the code to get outputs; assemble the task.

    Raises TaskBuildError when no drawn call tells the buggy function from the fixed one.
    """
    buggy = _render(rng, template, taken=set())
    site = template.sites[kind]
    fixed_line = buggy.lines[site]
    spare = buggy.var(template.spare) if template.spare else ""
    buggy_line = mutate(kind, fixed_line, spare)
    functions = _with_companions(rng, buggy)

    fixed_source = _module_source(package, module, functions, None)
    buggy_source = _module_source(package, module, functions, (buggy, site, buggy_line))

    reported = _exposing_calls(rng, buggy, fixed_source, buggy_source)
    checks = [_passing_call(rng, f, fixed_source, buggy_source) for f in functions if f is not buggy]

    test_path = f"tests/test_{module}.py"
    names = ", ".join(sorted(f.name for f in functions))
    base_tests = f"from {package}.{module} import {names}\n" + "".join(
        _test(f"test_{fn}", call, value) for fn, call, value in checks)
    suffixes = ("reported_case", "another_case")
    added = [(f"test_{buggy.name}_{suffixes[i]}", call, expected) for i, (call, _, expected) in enumerate(reported)]
    fixed_tests = base_tests + "".join(_test(name, call, value) for name, call, value in added)

    call, actual, expected = reported[0]
    statement = problem_statement(rng, package, module, buggy.name, call, actual, expected)
    if name_file:
        statement += f"\n`{buggy.name}` is defined in {package}/{module}.py.\n"
    if fixed_line.strip() in statement:
        raise TaskBuildError(f"the issue text of {package}.{module}.{buggy.name} would quote the fixed line")
    module_path = f"{package}/{module}.py"
    return GeneratedTask(
        package=package,
        module=module,
        kind=kind,
        template=template.key,
        function=buggy.name,
        variables=tuple(name for _, name in buggy.variables),
        files={
            f"{package}/__init__.py": f'"""{package}: small helpers."""\n',
            module_path: buggy_source,
            "pyproject.toml": _pyproject(package),
            test_path: base_tests,
        },
        gold_patch=file_diff(module_path, buggy_source, fixed_source),
        test_patch=file_diff(test_path, base_tests, fixed_tests),
        problem_statement=statement,
        fail_to_pass=[f"{test_path}::{name}" for name, _, _ in added],
        pass_to_pass=[f"{test_path}::test_{fn}" for fn, _, _ in checks],
        fixed_line=fixed_line,
        buggy_line=buggy_line,
    )


# ---------------------------------------------------------------------------- rendering


def _render(rng: Random, template: Template, taken: set[str]) -> Function:
    """``template`` with a fresh function name (not in ``taken``) and distinct variable names."""
    for _ in range(_NAME_TRIES):
        name = rng.choice(template.names).format(noun=rng.choice(NOUNS))
        if name not in taken:
            break
    else:
        raise TaskBuildError(f"no free function name for template {template.key!r} after {_NAME_TRIES} draws")
    used: set[str] = {name}
    variables = []
    for placeholder, role in template.roles.items():
        choices = [w for w in pool(role) if w not in used]
        word = rng.choice(choices)
        used.add(word)
        variables.append((placeholder, word))
    values = dict(variables, fn=name)
    return Function(template, name, tuple(variables), tuple(line.format(**values) for line in template.lines))


def _with_companions(rng: Random, buggy: Function) -> list[Function]:
    """The buggy function plus 1-3 correct ones, in a random order, within the module's line budget."""
    wanted = rng.randint(2, 4)
    others = [t for t in TEMPLATES if t.key != buggy.template.key]
    rng.shuffle(others)
    functions = [buggy]
    for template in others:
        if len(functions) == wanted:
            break
        if _module_lines(functions) + 2 + len(template.lines) > MAX_MODULE_LINES:
            continue
        functions.append(_render(rng, template, taken={f.name for f in functions}))
    rng.shuffle(functions)
    if _module_lines(functions) < MIN_MODULE_LINES:
        raise TaskBuildError(f"module of {buggy.name} is only {_module_lines(functions)} lines")
    return functions


def _module_lines(functions: list[Function]) -> int:
    # the docstring, then two blank lines before each function
    return 1 + sum(2 + len(f.lines) for f in functions)


def _module_source(package: str, module: str, functions: list[Function], bug: tuple[Function, int, str] | None) -> str:
    parts = [f'"""{module.capitalize()} helpers of {package}."""\n']
    for f in functions:
        lines = list(f.lines)
        if bug is not None and f is bug[0]:
            lines[bug[1]] = bug[2]
        parts.append("\n\n" + "\n".join(lines) + "\n")
    return "".join(parts)


def _pyproject(package: str) -> str:
    return (f'[project]\nname = "{package}"\nversion = "0.1.0"\nrequires-python = ">=3.9"\n\n'
            '[tool.pytest.ini_options]\npythonpath = ["."]\ntestpaths = ["tests"]\n')


def _test(name: str, call: str, value: str) -> str:
    return f"\n\ndef {name}():\n    assert {call} == {value}\n"


# ---------------------------------------------------------------------------- inputs


def _call(function: Function, args: tuple) -> str:
    return f"{function.name}({', '.join(repr(a) for a in args)})"


def _exposing_calls(rng: Random, buggy: Function, fixed_source: str, buggy_source: str) -> list[tuple[str, str, str]]:
    """1-2 distinct (call, buggy repr, fixed repr) where both run and disagree."""
    calls = list(dict.fromkeys(_call(buggy, buggy.template.args(rng)) for _ in range(_CANDIDATE_CALLS)))
    fixed, broken = run_calls(fixed_source, calls), run_calls(buggy_source, calls)
    exposing = [(c, b.value, f.value) for c, f, b in zip(calls, fixed, broken) if f.ok and b.ok and f.value != b.value]
    if not exposing:
        raise TaskBuildError(f"no drawn input of {buggy.name} ({buggy.template.key}) exposes the bug")
    return exposing[: rng.randint(1, 2)]


def _passing_call(rng: Random, function: Function, fixed_source: str, buggy_source: str) -> tuple[str, str, str]:
    """(function name, call, fixed repr) of a call that gives the same value in both modules."""
    call = _call(function, function.template.args(rng))
    (fixed,), (broken,) = run_calls(fixed_source, [call]), run_calls(buggy_source, [call])
    if not fixed.ok or fixed != broken:
        raise TaskBuildError(f"{call} does not run the same in the fixed and the buggy module")
    return function.name, call, fixed.value
