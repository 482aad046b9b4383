"""Formatting rows of values as delimited text."""

from __future__ import annotations

from collections.abc import Iterable

from csvlite.dialect import DEFAULT, Dialect


def _needs_quoting(value: str, dialect: Dialect) -> bool:
    """True when ``value`` cannot be written bare."""
    special = (dialect.delimiter, dialect.quotechar, "\n", "\r")
    return any(char in value for char in special) or value != value.strip()


def format_field(value: object, dialect: Dialect = DEFAULT) -> str:
    """Render one value, quoting it when it contains special characters.

    ``None`` is written as an empty field; other values go through ``str``.
    """
    text = "" if value is None else str(value)
    if _needs_quoting(text, dialect):
        q = dialect.quotechar
        return f"{q}{text}{q}"
    return text


def format_row(values: Iterable[object], dialect: Dialect = DEFAULT) -> str:
    """Render a row of values as one line, without the line terminator."""
    return dialect.delimiter.join(format_field(value, dialect) for value in values)


def write_rows(rows: Iterable[Iterable[object]], dialect: Dialect = DEFAULT) -> str:
    """Render several rows, each ended by ``dialect.lineterminator``."""
    return "".join(format_row(row, dialect) + dialect.lineterminator for row in rows)
