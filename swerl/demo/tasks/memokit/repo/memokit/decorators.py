"""The ``@memoize`` decorator."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from memokit.keys import make_key
from memokit.lru import LRUCache

F = TypeVar("F", bound=Callable[..., Any])
_MISSING = object()


def memoize(maxsize: int = 128) -> Callable[[F], F]:
    """Cache a function's results in an :class:`LRUCache` of ``maxsize`` entries.

    The wrapped function gains ``cache_info()`` and ``cache_clear()``, like
    :func:`functools.lru_cache`.
    """

    def decorator(func: F) -> F:
        cache = LRUCache(maxsize)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = make_key(args)
            result = cache.get(key, _MISSING)
            if result is _MISSING:
                result = func(*args, **kwargs)
                cache.put(key, result)
            return result

        wrapper.cache_info = cache.info  # type: ignore[attr-defined]
        wrapper.cache_clear = cache.clear  # type: ignore[attr-defined]
        wrapper.cache = cache  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorator
