import pytest

from memokit.keys import make_key


def test_single_simple_argument_is_its_own_key():
    assert make_key(("abc",)) == "abc"
    assert make_key((7,)) == 7


def test_several_arguments_make_a_tuple_key():
    assert make_key((1, "a")) == (1, "a")
    assert make_key((1, "a")) != make_key(("a", 1))


def test_unhashable_argument_raises_type_error():
    with pytest.raises(TypeError):
        make_key(([1, 2],))
