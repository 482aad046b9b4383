"""Splitting a sequence into pages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pagekit.errors import EmptyPage, PageNotAnInteger
from pagekit.page import Page


class Paginator:
    """Serve ``items`` as pages of ``per_page`` items each.

    An empty sequence has a single, empty first page.
    """

    def __init__(self, items: Sequence[Any], per_page: int) -> None:
        if per_page < 1:
            raise ValueError(f"per_page must be at least 1, got {per_page}")
        self.items = items
        self.per_page = per_page

    @property
    def count(self) -> int:
        """Total number of items across all pages."""
        return len(self.items)

    @property
    def num_pages(self) -> int:
        """Number of pages, at least 1."""
        return self.count // self.per_page + 1

    @property
    def page_range(self) -> range:
        """The valid page numbers, 1-based."""
        return range(1, self.num_pages + 1)

    def validate_number(self, number: Any) -> int:
        """Return ``number`` as an int, or raise if it is not a valid page."""
        if isinstance(number, float) and not number.is_integer():
            raise PageNotAnInteger(f"page number {number!r} is not an integer")
        try:
            number = int(number)
        except (TypeError, ValueError):
            raise PageNotAnInteger(f"page number {number!r} is not an integer") from None
        if number < 1:
            raise EmptyPage(f"page number {number} is less than 1")
        if number > self.num_pages:
            raise EmptyPage(f"page {number} is past the last page ({self.num_pages})")
        return number

    def page(self, number: Any) -> Page:
        """Return the :class:`Page` for 1-based ``number``."""
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        top = bottom + self.per_page
        return Page(self.items[bottom:top], number, self)

    def __iter__(self):
        for number in self.page_range:
            yield self.page(number)
