"""The units a duration may be written in."""

from __future__ import annotations

from durations.errors import DurationError

#: Seconds per unit, from the largest unit to the smallest.
UNITS: dict[str, int] = {
    "h": 3600,
    "m": 60,
    "s": 1,
}


def unit_seconds(symbol: str) -> int:
    """Seconds in one ``symbol`` (``"m"`` -> 60); raise DurationError if unknown."""
    try:
        return UNITS[symbol]
    except KeyError:
        known = ", ".join(UNITS)
        raise DurationError(f"unknown unit {symbol!r} (known units: {known})") from None


def rank(symbol: str) -> int:
    """Position of ``symbol`` in :data:`UNITS`, 0 for the largest unit."""
    unit_seconds(symbol)
    return list(UNITS).index(symbol)
