import pytest

from durations import DurationError, parse_duration


def test_single_units():
    assert [parse_duration(t) for t in ["45s", "2m", "3h"]] == [45, 120, 10800]


def test_combined_units():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("1h 0m 5s") == 3605


def test_units_are_case_insensitive():
    assert parse_duration("2H") == 7200


def test_unknown_unit():
    with pytest.raises(DurationError, match="unknown unit 'y'"):
        parse_duration("3y")


def test_units_out_of_order():
    with pytest.raises(DurationError, match="out of order"):
        parse_duration("30m1h")


def test_garbage_is_rejected():
    for text in ["", "  ", "h", "12", "1h!"]:
        with pytest.raises(DurationError):
            parse_duration(text)
