import pytest

from envcfg import converters


def test_to_int_strips_whitespace():
    assert converters.to_int("  42\n") == 42


def test_to_bool_is_case_insensitive():
    assert converters.to_bool("TRUE") is True
    assert converters.to_bool("No") is False


def test_to_bool_rejects_other_words():
    with pytest.raises(ValueError):
        converters.to_bool("maybe")


def test_to_list_custom_separator():
    assert converters.to_list("a;b;;c", separator=";") == ["a", "b", "c"]
