"""ledger: exact money arithmetic and invoices."""

from ledger.formatting import format_money
from ledger.invoice import Invoice, Line
from ledger.money import CurrencyMismatch, Money

__all__ = ["CurrencyMismatch", "Invoice", "Line", "Money", "format_money"]
