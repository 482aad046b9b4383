import pytest

from vercmp import InvalidSpecifier, Specifier, SpecifierSet


def test_single_specifier():
    assert Specifier(">=1.2").contains("1.2.0")
    assert not Specifier("<1.2").contains("1.2")


def test_specifier_set_requires_all():
    spec = SpecifierSet(">=1.2, <2.0, !=1.3.1")
    assert spec.contains("1.5")
    assert not spec.contains("1.3.1")
    assert not spec.contains("2.0")


def test_empty_set_matches_everything():
    assert SpecifierSet("").contains("0.1")


def test_filter_keeps_order():
    assert SpecifierSet(">1.0").filter(["1.2", "0.9", "1.1"]) == ["1.2", "1.1"]


def test_invalid_specifier():
    with pytest.raises(InvalidSpecifier):
        Specifier("~1.2")
