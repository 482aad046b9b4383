"""Bug kinds: each a pure function from a correct line of code to its buggy twin.

A mutator returns ``None`` when the line holds nothing it knows how to break, so a template
that names a line for a kind is checked when the curriculum is built, not trusted. Every
bug is a one-line change: the gold patch restores the one line the mutator changed.
``spare`` is a second variable in scope; only ``wrong_variable`` uses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

BugKindName = Literal[
    "arithmetic_operator",
    "comparison_boundary",
    "wrong_constant",
    "wrong_variable",
    "inverted_condition",
    "string_method",
    "default_argument",
    "wrong_index",
]

Mutator = Callable[[str, str], "str | None"]

# Each table maps the correct token to the bug it becomes; only space-delimited operators
# are touched, so `x[-1]` or `**kwargs` never count as arithmetic.
_ARITHMETIC = {" + ": " - ", " - ": " + ", " * ": " // ", " // ": " * "}
_COMPARISON = {" <= ": " < ", " < ": " <= ", " >= ": " > ", " > ": " >= "}
_CONSTANTS = {"1000": "100", "100": "10", "60": "6", "24": "12", "12": "10", "7": "5", "3": "2"}
_STRING_METHODS = {".upper()": ".lower()", ".lower()": ".upper()", ".strip()": ".rstrip()",
                   ".rstrip()": ".lstrip()", ".lstrip()": ".rstrip()"}
_INDEXES = {"[0]": "[-1]", "[-1]": "[0]"}
_STRING_DEFAULTS = {'", "': '","', '"_"': '"-"', '"-"': '"_"', '"."': '","', '" "': '""', '":"': '"="'}

_NUMBER = re.compile(r"(?<![\w.])(\d+)(?![\w.])")
_RETURN_NAME = re.compile(r"^(\s*return )([A-Za-z_]\w*)$")
_IF_NOT = re.compile(r"\bif not ")
_IF = re.compile(r"\bif ")
_DEFAULT = re.compile(r"(\w+=)(\"[^\"]*\"|-?\d+|True|False)")


def _first_token(line: str, table: dict[str, str]) -> str | None:
    """Replace the leftmost token of ``table`` found in ``line`` (longest wins at a tie)."""
    hits = [(line.find(token), -len(token), token) for token in table if token in line]
    if not hits:
        return None
    at, _, token = min(hits)
    return line[:at] + table[token] + line[at + len(token):]


def arithmetic_operator(line: str, spare: str = "") -> str | None:
    """``a + b`` -> ``a - b``, ``a * b`` -> ``a // b`` (and back)."""
    return _first_token(line, _ARITHMETIC)


def comparison_boundary(line: str, spare: str = "") -> str | None:
    """Off by one at the boundary: ``<=`` -> ``<``, ``>`` -> ``>=`` (and back)."""
    return _first_token(line, _COMPARISON)


def wrong_constant(line: str, spare: str = "") -> str | None:
    """The first integer literal with a known wrong twin: ``100`` -> ``10``, ``60`` -> ``6``."""
    for m in _NUMBER.finditer(line):
        if m.group(1) in _CONSTANTS:
            return line[: m.start()] + _CONSTANTS[m.group(1)] + line[m.end():]
    return None


def wrong_variable(line: str, spare: str = "") -> str | None:
    """``return total`` -> ``return <spare>``: a plain return of the wrong name."""
    m = _RETURN_NAME.match(line)
    if m is None or not spare or m.group(2) == spare:
        return None
    return m.group(1) + spare


def inverted_condition(line: str, spare: str = "") -> str | None:
    """``if not x`` -> ``if x``; a condition without ``not`` gains one."""
    if _IF_NOT.search(line):
        return _IF_NOT.sub("if ", line, count=1)
    if _IF.search(line):
        return _IF.sub("if not ", line, count=1)
    return None


def string_method(line: str, spare: str = "") -> str | None:
    """``.upper()`` <-> ``.lower()``, ``.strip()`` -> ``.rstrip()`` -> ``.lstrip()``."""
    return _first_token(line, _STRING_METHODS)


def default_argument(line: str, spare: str = "") -> str | None:
    """The first default of a ``def`` line changes: ``digits=2`` -> ``digits=3``, ``sep=", "`` -> ``sep=","``."""
    if not line.lstrip().startswith("def "):
        return None
    for m in _DEFAULT.finditer(line):
        value = m.group(2)
        if value in ("True", "False"):
            wrong = "False" if value == "True" else "True"
        elif value.startswith('"'):
            wrong = _STRING_DEFAULTS.get(value)
            if wrong is None:
                continue
        else:
            wrong = str(int(value) + 1)
        return line[: m.start(2)] + wrong + line[m.end(2):]
    return None


def wrong_index(line: str, spare: str = "") -> str | None:
    """``xs[0]`` <-> ``xs[-1]``: the other end of the sequence."""
    return _first_token(line, _INDEXES)


MUTATORS: dict[str, Mutator] = {
    "arithmetic_operator": arithmetic_operator,
    "comparison_boundary": comparison_boundary,
    "wrong_constant": wrong_constant,
    "wrong_variable": wrong_variable,
    "inverted_condition": inverted_condition,
    "string_method": string_method,
    "default_argument": default_argument,
    "wrong_index": wrong_index,
}

BUG_KINDS: tuple[str, ...] = tuple(MUTATORS)


def mutate(kind: str, line: str, spare: str = "") -> str:
    """The buggy twin of ``line`` for ``kind``; ValueError when the kind cannot break it."""
    if kind not in MUTATORS:
        raise ValueError(f"unknown bug kind {kind!r}; choose from {list(BUG_KINDS)}")
    buggy = MUTATORS[kind](line, spare)
    if buggy is None or buggy == line:
        raise ValueError(f"bug kind {kind!r} does not apply to the line {line.strip()!r}")
    return buggy
