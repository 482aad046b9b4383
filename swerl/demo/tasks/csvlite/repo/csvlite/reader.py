"""Parsing delimited text into lists of fields."""

from __future__ import annotations

from csvlite.dialect import DEFAULT, Dialect


def parse_line(line: str, dialect: Dialect = DEFAULT) -> list[str]:
    """Split one line into its fields.

    Fields may be surrounded by ``dialect.quotechar``; inside a quoted field
    the delimiter is an ordinary character. A trailing line terminator is
    ignored.

    >>> parse_line('a,"b,c",d')
    ['a', 'b,c', 'd']
    """
    line = line.rstrip("\r\n")
    fields: list[str] = []
    current: list[str] = []
    in_quotes = False
    for char in line:
        if char == dialect.quotechar:
            in_quotes = not in_quotes
        elif char == dialect.delimiter and not in_quotes:
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    if in_quotes:
        raise ValueError(f"unterminated quoted field in line: {line!r}")
    fields.append("".join(current))
    return fields


def read_rows(text: str, dialect: Dialect = DEFAULT) -> list[list[str]]:
    """Parse every non-blank line of ``text``."""
    return [parse_line(line, dialect) for line in text.splitlines() if line.strip()]
