"""Human-readable amounts."""

from __future__ import annotations

from ledger.money import Money

SYMBOLS = {"USD": "$", "EUR": "\u20ac", "GBP": "\u00a3"}


def format_money(money: Money, with_symbol: bool = True) -> str:
    """``Money('1234.5', 'USD')`` -> ``'$1,234.50'``; unknown currencies use their code."""
    sign = "-" if money.amount < 0 else ""
    digits = f"{abs(money.amount):,.2f}"
    if not with_symbol:
        return f"{sign}{digits}"
    symbol = SYMBOLS.get(money.currency)
    if symbol is None:
        return f"{sign}{digits} {money.currency}"
    return f"{sign}{symbol}{digits}"
