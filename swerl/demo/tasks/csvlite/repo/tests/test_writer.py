from csvlite import TSV, format_row, write_rows


def test_plain_values():
    assert format_row(["a", "b", "c"]) == "a,b,c"


def test_values_are_converted_to_text():
    assert format_row([1, 2.5, None, True]) == "1,2.5,,True"


def test_delimiter_forces_quoting():
    assert format_row(["a", "b,c"]) == 'a,"b,c"'


def test_surrounding_spaces_force_quoting():
    assert format_row([" padded "]) == '" padded "'


def test_tsv_does_not_quote_commas():
    assert format_row(["a,b", "c"], TSV) == "a,b\tc"


def test_write_rows_ends_every_line():
    assert write_rows([["a", "b"], [1, 2]]) == "a,b\n1,2\n"
