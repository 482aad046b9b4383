"""The Money value type."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Union

Number = Union[Decimal, int, str]
CENT = Decimal("0.01")


class CurrencyMismatch(ValueError):
    """Arithmetic between amounts in different currencies."""


def to_decimal(value: Number) -> Decimal:
    """Convert ``value`` exactly; floats are refused because they are not exact."""
    if isinstance(value, float):
        raise TypeError("use str or Decimal for money, not float")
    return value if isinstance(value, Decimal) else Decimal(value)


def round_cents(amount: Decimal) -> Decimal:
    """Round ``amount`` to whole cents."""
    return amount.quantize(CENT)


@dataclass(frozen=True)
class Money:
    """An amount of a currency, always held to whole cents."""

    amount: Decimal
    currency: str = "USD"

    def __init__(self, amount: Number, currency: str = "USD") -> None:
        object.__setattr__(self, "amount", round_cents(to_decimal(amount)))
        object.__setattr__(self, "currency", currency)

    def __repr__(self) -> str:
        return f"Money('{self.amount}', '{self.currency}')"

    def _check(self, other: Money) -> None:
        if other.currency != self.currency:
            raise CurrencyMismatch(f"{self.currency} and {other.currency} cannot be combined")

    def __add__(self, other: Money) -> Money:
        self._check(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._check(other)
        return Money(self.amount - other.amount, self.currency)

    def __mul__(self, factor: Number) -> Money:
        return Money(self.amount * to_decimal(factor), self.currency)

    __rmul__ = __mul__

    def allocate(self, ratios: list[int]) -> list[Money]:
        """Split into parts proportional to ``ratios``; leftover cents go to the first parts."""
        if not ratios or any(r < 0 for r in ratios) or sum(ratios) == 0:
            raise ValueError("ratios must be non-negative and not all zero")
        cents = int(self.amount / CENT)
        total = sum(ratios)
        shares = [cents * r // total for r in ratios]
        for i in range(cents - sum(shares)):
            shares[i] += 1
        return [Money(Decimal(share) * CENT, self.currency) for share in shares]
