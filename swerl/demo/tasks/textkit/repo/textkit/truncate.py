"""Shortening text without cutting words in half."""

from __future__ import annotations

ELLIPSIS = "\u2026"


def truncate_words(text: str, count: int, ellipsis: str = ELLIPSIS) -> str:
    """Keep the first ``count`` words of ``text``.

    Whitespace between kept words is normalised to single spaces. The
    ``ellipsis`` is appended only when words were dropped.
    """
    if count < 0:
        raise ValueError("count must not be negative")
    parts = text.split()
    if len(parts) <= count:
        return " ".join(parts)
    return " ".join(parts[:count]) + ellipsis
