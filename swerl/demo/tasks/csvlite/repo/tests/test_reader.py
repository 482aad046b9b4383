import pytest

from csvlite import TSV, parse_line, read_rows


def test_plain_fields():
    assert parse_line("a,b,c") == ["a", "b", "c"]


def test_quoted_field_keeps_delimiter():
    assert parse_line('1,"Smith, Jane",42') == ["1", "Smith, Jane", "42"]


def test_empty_fields_are_kept():
    assert parse_line(",x,,") == ["", "x", "", ""]


def test_line_terminator_is_ignored():
    assert parse_line("a,b\r\n") == ["a", "b"]


def test_tsv_dialect():
    assert parse_line("a b\tc", TSV) == ["a b", "c"]


def test_unterminated_quote_is_an_error():
    with pytest.raises(ValueError, match="unterminated"):
        parse_line('a,"b')


def test_read_rows_skips_blank_lines():
    assert read_rows("a,b\n\n1,2\n") == [["a", "b"], ["1", "2"]]
