"""Invoices made of priced lines plus tax."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from ledger.money import Money, Number, to_decimal


@dataclass(frozen=True)
class Line:
    description: str
    unit_price: Money
    quantity: int = 1

    @property
    def amount(self) -> Money:
        return self.unit_price * self.quantity


@dataclass
class Invoice:
    """A list of lines in one currency, taxed at ``tax_rate`` (e.g. ``"0.2"``)."""

    currency: str = "USD"
    tax_rate: Number = "0"
    lines: list[Line] = field(default_factory=list)

    def add_line(self, description: str, unit_price: Number, quantity: int = 1) -> Line:
        if quantity < 1:
            raise ValueError("quantity must be at least 1")
        line = Line(description, Money(unit_price, self.currency), quantity)
        self.lines.append(line)
        return line

    def subtotal(self) -> Money:
        total = Money(0, self.currency)
        for line in self.lines:
            total = total + line.amount
        return total

    def tax(self) -> Money:
        """Tax on the subtotal, rounded to cents."""
        rate = to_decimal(self.tax_rate)
        if rate < 0:
            raise ValueError("tax_rate must not be negative")
        return Money(self.subtotal().amount * rate, self.currency)

    def total(self) -> Money:
        return self.subtotal() + self.tax()

    def tax_percent(self) -> Decimal:
        return to_decimal(self.tax_rate) * 100
