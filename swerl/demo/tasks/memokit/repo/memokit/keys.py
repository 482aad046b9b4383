"""Building hashable cache keys from call arguments."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

# Types whose values are cheap to hash and can never be confused with a tuple key.
_FAST_TYPES = frozenset({int, str, bytes})


def make_key(args: tuple[Any, ...]) -> Hashable:
    """Return a hashable key identifying a call with positional ``args``.

    A single argument of a simple type is its own key, which keeps the common
    case cheap; anything else becomes a tuple.

    Raises ``TypeError`` if an argument is not hashable.
    """
    if len(args) == 1 and type(args[0]) in _FAST_TYPES:
        return args[0]
    key = tuple(args)
    hash(key)  # fail early, and with a clear TypeError, on unhashable arguments
    return key
