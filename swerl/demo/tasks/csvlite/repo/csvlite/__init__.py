"""csvlite: minimal reader and writer for delimiter-separated text."""

from csvlite.dialect import DEFAULT, TSV, Dialect
from csvlite.reader import parse_line, read_rows
from csvlite.writer import format_row, write_rows

__all__ = ["DEFAULT", "TSV", "Dialect", "format_row", "parse_line", "read_rows", "write_rows"]
__version__ = "0.1.0"
