"""memokit: memoisation with a bounded LRU cache."""

from memokit.decorators import memoize
from memokit.lru import CacheInfo, LRUCache

__all__ = ["CacheInfo", "LRUCache", "memoize"]
