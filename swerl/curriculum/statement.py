"""The issue text of a generated task: a short user bug report with a reproduction.

It names the function, shows one call with the output the user got and says what they
expected; both outputs come from really running the buggy and the fixed code. It never
quotes source code, so the fix is not in the text.
"""

from __future__ import annotations

from random import Random

_TITLES = (
    "`{fn}` returns the wrong result",
    "Wrong value from {module}.{fn}",
    "Unexpected result from {fn}",
    "{fn} gives a wrong answer",
)
_INTROS = (
    "Calling `{fn}` gives a result I did not expect:",
    "I use `{package}.{module}` and `{fn}` returns the wrong value:",
    "Here is a small reproduction:",
    "`{fn}` looks broken to me:",
)
_OUTROS = (
    "I expected `{expected}`.",
    "Expected `{expected}`, got `{actual}`.",
    "It should return `{expected}`.",
    "The right answer here is `{expected}`.",
)


def problem_statement(rng: Random, package: str, module: str, fn: str, call: str, actual: str, expected: str) -> str:
    """A bug report whose wording is drawn with ``rng``; ``actual``/``expected`` are reprs."""
    values = {"fn": fn, "module": module, "package": package, "actual": actual, "expected": expected}
    title, intro, outro = (rng.choice(options).format(**values) for options in (_TITLES, _INTROS, _OUTROS))
    return (
        f"{title}\n\n{intro}\n\n```python\n>>> from {package}.{module} import {fn}\n>>> {call}\n{actual}\n```\n\n"
        f"{outro}\n"
    )
