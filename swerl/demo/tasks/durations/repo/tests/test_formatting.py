import pytest

from durations import DurationError, format_duration, parse_duration


def test_format_combined():
    assert format_duration(5400) == "1h30m"
    assert format_duration(3605) == "1h5s"


def test_format_zero():
    assert format_duration(0) == "0s"


def test_format_many_hours():
    assert format_duration(5 * 3600) == "5h"


def test_format_rejects_negative_and_non_int():
    for value in [-1, 1.5, True]:
        with pytest.raises(DurationError):
            format_duration(value)


def test_round_trip():
    for seconds in [1, 59, 61, 3599, 3601, 86399]:
        assert parse_duration(format_duration(seconds)) == seconds
