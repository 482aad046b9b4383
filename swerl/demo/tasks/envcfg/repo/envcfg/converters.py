"""Converting raw variable text to Python values."""

from __future__ import annotations

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def to_int(text: str) -> int:
    """Parse a base-10 integer; surrounding whitespace is ignored."""
    return int(text.strip())


def to_bool(text: str) -> bool:
    """Parse a boolean word such as ``yes`` or ``Off``."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"{text!r} is not a boolean")


def to_list(text: str, separator: str = ",") -> list[str]:
    """Split on ``separator`` and drop empty items: ``"a, b,"`` -> ``["a", "b"]``."""
    return [item.strip() for item in text.split(separator) if item.strip()]
