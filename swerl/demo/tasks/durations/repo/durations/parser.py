"""Parsing duration text into seconds."""

from __future__ import annotations

import re

from durations.errors import DurationError
from durations.units import rank, unit_seconds

_PART = re.compile(r"\s*(\d+)\s*([a-zA-Z]+)\s*")


def parse_duration(text: str) -> int:
    """Return the number of seconds in ``text`` such as ``"1h30m"``.

    Raises :class:`DurationError` for empty text, unknown units, units out of
    order or repeated, and anything that is not ``<number><unit>`` parts.
    """
    if not text or not text.strip():
        raise DurationError("empty duration")
    total = 0
    position = 0
    last_rank = -1
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        number, symbol = int(match.group(1)), match.group(2).lower()
        current = rank(symbol)
        if current <= last_rank:
            raise DurationError(f"unit {symbol!r} is repeated or out of order in {text!r}")
        last_rank = current
        total += number * unit_seconds(symbol)
        position = match.end()
    if position != len(text):
        raise DurationError(f"cannot parse {text!r} at position {position}")
    return total
