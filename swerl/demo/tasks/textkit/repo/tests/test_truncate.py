import pytest

from textkit import truncate_words


def test_short_text_is_unchanged():
    assert truncate_words("one two", 5) == "one two"


def test_long_text_gets_ellipsis():
    assert truncate_words("The quick brown fox", 2) == "The quick\u2026"


def test_custom_ellipsis():
    assert truncate_words("a b c", 1, ellipsis="...") == "a..."


def test_negative_count_is_rejected():
    with pytest.raises(ValueError):
        truncate_words("a", -1)
