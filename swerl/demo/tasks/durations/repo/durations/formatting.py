"""Formatting seconds as compact duration text."""

from __future__ import annotations

from durations.errors import DurationError

# Units used when formatting, largest first.
_FORMAT_UNITS = (("h", 3600), ("m", 60), ("s", 1))


def format_duration(seconds: int) -> str:
    """Format ``seconds`` using the largest units first: 5400 -> ``"1h30m"``.

    Zero components are left out; zero itself is ``"0s"``.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise DurationError(f"seconds must be an int, got {seconds!r}")
    if seconds < 0:
        raise DurationError("negative durations cannot be formatted")
    if seconds == 0:
        return "0s"
    parts = []
    remaining = seconds
    for symbol, size in _FORMAT_UNITS:
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{symbol}")
    return "".join(parts)
