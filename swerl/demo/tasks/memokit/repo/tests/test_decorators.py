from memokit import CacheInfo, memoize


def test_results_are_cached():
    calls = []

    @memoize()
    def square(x):
        calls.append(x)
        return x * x

    assert [square(3), square(3), square(4)] == [9, 9, 16]
    assert calls == [3, 4]


def test_cache_info_and_clear():
    @memoize(maxsize=10)
    def double(x):
        return 2 * x

    double(1)
    double(1)
    assert double.cache_info() == CacheInfo(hits=1, misses=1, maxsize=10, currsize=1)
    double.cache_clear()
    assert double.cache_info().currsize == 0


def test_wrapper_keeps_metadata():
    @memoize()
    def documented(x):
        """Docstring."""
        return x

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Docstring."


def test_none_results_are_cached_too():
    calls = []

    @memoize()
    def nothing(x):
        calls.append(x)

    nothing(1)
    nothing(1)
    assert calls == [1]
