from decimal import Decimal

import pytest

from ledger import Invoice, Money, format_money


def make_invoice(rate="0.09"):
    invoice = Invoice(currency="USD", tax_rate=rate)
    invoice.add_line("Widget", "10.00")
    invoice.add_line("Cable", "3.20", quantity=2)
    return invoice


def test_subtotal():
    assert make_invoice().subtotal() == Money("16.40")


def test_tax_and_total():
    invoice = make_invoice("0.2")
    assert invoice.tax() == Money("3.28")
    assert invoice.total() == Money("19.68")


def test_zero_tax():
    assert make_invoice("0").total() == Money("16.40")


def test_quantity_must_be_positive():
    with pytest.raises(ValueError):
        Invoice().add_line("Nothing", "1.00", quantity=0)


def test_tax_percent():
    assert make_invoice("0.075").tax_percent() == Decimal("7.5")


def test_format_money():
    assert format_money(Money("1234.5")) == "$1,234.50"
    assert format_money(Money("-3", "CHF")) == "-3.00 CHF"
