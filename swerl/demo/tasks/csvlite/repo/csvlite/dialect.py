"""Dialects: the characters that delimit fields and quote them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    """How fields are separated and quoted.

    ``delimiter`` separates fields, ``quotechar`` surrounds fields that contain
    special characters, and ``lineterminator`` ends each written row.
    """

    delimiter: str = ","
    quotechar: str = '"'
    lineterminator: str = "\n"

    def __post_init__(self) -> None:
        if len(self.delimiter) != 1:
            raise ValueError(f"delimiter must be a single character, got {self.delimiter!r}")
        if len(self.quotechar) != 1:
            raise ValueError(f"quotechar must be a single character, got {self.quotechar!r}")
        if self.delimiter == self.quotechar:
            raise ValueError("delimiter and quotechar must differ")


DEFAULT = Dialect()
TSV = Dialect(delimiter="\t")
