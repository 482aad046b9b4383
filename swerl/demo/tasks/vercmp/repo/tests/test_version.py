import pytest

from vercmp import InvalidVersion, Version


def test_parse_and_str():
    assert str(Version("v1.2.3")) == "1.2.3"


def test_trailing_zeros_are_equal():
    assert Version("1.4") == Version("1.4.0")
    assert hash(Version("1.4")) == hash(Version("1.4.0"))


def test_single_digit_ordering():
    assert Version("1.2.3") < Version("1.3")
    assert Version("2.0") > Version("1.9.9")


def test_compare_with_string():
    assert Version("1.0") == "1.0.0"


def test_invalid_versions_are_rejected():
    for text in ["", "1..2", "1.a", "-1"]:
        with pytest.raises(InvalidVersion):
            Version(text)


def test_major():
    assert Version("3.1").major == 3
