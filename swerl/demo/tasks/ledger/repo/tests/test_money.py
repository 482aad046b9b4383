import pytest

from ledger import CurrencyMismatch, Money


def test_amounts_are_held_in_cents():
    assert Money("12.5").amount == Money("12.50").amount
    assert str(Money("3").amount) == "3.00"


def test_addition_and_subtraction():
    assert Money("1.10") + Money("2.20") == Money("3.30")
    assert Money("5.00") - Money("7.25") == Money("-2.25")


def test_multiplication_by_quantity():
    assert Money("3.20") * 3 == Money("9.60")
    assert 2 * Money("0.35") == Money("0.70")


def test_floats_are_refused():
    with pytest.raises(TypeError):
        Money(0.1)


def test_currencies_do_not_mix():
    with pytest.raises(CurrencyMismatch):
        Money("1", "USD") + Money("1", "EUR")


def test_allocate_keeps_every_cent():
    parts = Money("100.00").allocate([1, 1, 1])
    assert parts == [Money("33.34"), Money("33.33"), Money("33.33")]
