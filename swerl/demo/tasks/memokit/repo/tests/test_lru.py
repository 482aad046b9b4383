import pytest

from memokit import CacheInfo, LRUCache


def test_get_and_put():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.get("missing", "default") == "default"


def test_least_recently_used_is_evicted():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)
    assert "a" in cache and "c" in cache and "b" not in cache


def test_statistics_and_clear():
    cache = LRUCache(4)
    cache.put("a", 1)
    cache.get("a")
    cache.get("b")
    assert cache.info() == CacheInfo(hits=1, misses=1, maxsize=4, currsize=1)
    cache.clear()
    assert cache.info() == CacheInfo(hits=0, misses=0, maxsize=4, currsize=0)


def test_maxsize_must_be_positive():
    with pytest.raises(ValueError):
        LRUCache(0)
