"""A single page of results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pagekit.paginator import Paginator


class Page(Sequence):
    """The items on page ``number`` (1-based) of ``paginator``."""

    def __init__(self, items: Sequence[Any], number: int, paginator: Paginator) -> None:
        self.items = items
        self.number = number
        self.paginator = paginator

    def __repr__(self) -> str:
        return f"<Page {self.number} of {self.paginator.num_pages}>"

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]

    def has_next(self) -> bool:
        return self.number < self.paginator.num_pages

    def has_previous(self) -> bool:
        return self.number > 1

    def next_page_number(self) -> int:
        return self.paginator.validate_number(self.number + 1)

    def previous_page_number(self) -> int:
        return self.paginator.validate_number(self.number - 1)

    def start_index(self) -> int:
        """1-based index of the first item on this page (0 for an empty page)."""
        if not self.items:
            return 0
        return (self.number - 1) * self.paginator.per_page + 1

    def end_index(self) -> int:
        """1-based index of the last item on this page."""
        return self.start_index() + len(self.items) - 1 if self.items else 0
