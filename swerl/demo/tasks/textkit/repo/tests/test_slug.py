from textkit import slugify


def test_punctuation_becomes_separator():
    assert slugify("Hello, World!") == "hello-world"


def test_custom_separator():
    assert slugify("Release notes 2.0", sep="_") == "release_notes_2_0"


def test_leading_and_trailing_junk_is_removed():
    assert slugify("  --Draft: my post--  ") == "draft-my-post"


def test_max_length_cuts_at_word_boundary():
    assert slugify("the quick brown fox", max_length=12) == "the-quick"


def test_max_length_without_boundary():
    assert slugify("abcdefghij", max_length=4) == "abcd"


def test_empty_text():
    assert slugify("!!!") == ""
