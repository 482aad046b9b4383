"""Run generated code for real, so issue texts and tests show what the code actually does.

Modules are executed with ``exec`` in a fresh namespace whose builtins are a short allow-list
(no ``open``, ``__import__``, ``eval``): generated code is the project's own templates, but a
template mistake should fail loudly here rather than touch the host.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

_ALLOWED_BUILTINS = ("abs", "bool", "float", "int", "len", "list", "max", "min", "range", "round", "sorted", "str", "sum")


@dataclass(frozen=True)
class Outcome:
    """What one call did: its value's ``repr``, or the exception it raised."""

    value: str | None  # repr of the returned value; None when the call raised
    error: str | None = None  # "TypeError: ..." when the call raised

    @property
    def ok(self) -> bool:
        return self.error is None


def _namespace() -> dict:
    return {"__builtins__": {name: getattr(builtins, name) for name in _ALLOWED_BUILTINS}, "__name__": "generated"}


def run_calls(source: str, calls: list[str]) -> list[Outcome]:
    """Execute module ``source``, then each call expression (``"f([1, 2], 3)"``) in its namespace.

    Raises ValueError naming the module's first line when the source itself does not run.
    """
    namespace = _namespace()
    try:
        exec(compile(source, "<generated>", "exec"), namespace)
    except Exception as e:  # noqa: BLE001 - any failure is a template bug, reported with its text
        raise ValueError(f"generated module does not run ({type(e).__name__}: {e}); source:\n{source}") from e
    outcomes = []
    for call in calls:
        try:
            outcomes.append(Outcome(repr(eval(call, namespace))))  # noqa: S307 - own code, restricted builtins
        except Exception as e:  # noqa: BLE001 - a raising call is a fact about the code, not an error here
            outcomes.append(Outcome(None, f"{type(e).__name__}: {e}"))
    return outcomes
