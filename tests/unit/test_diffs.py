"""Specification of swerl.grading.diffs: splitting a diff into per-file sections."""

import pytest

from swerl.grading.diffs import DiffParseError, FileDiff, join_diff, split_diff
from swerl.grading.path_rules import safe_relative_path


def lines(*rows: str) -> str:
    # Diffs are spelled line by line: blank context lines are a single space, which an
    # editor would strip from a triple-quoted string.
    return "\n".join(rows) + "\n"


# `git diff --cached -M` of a commit that deletes, chmods, symlinks, edits, renames and creates.
GIT_DIFF = lines(
    "diff --git a/docs/old.txt b/docs/old.txt",
    "deleted file mode 100644",
    "index e9da5a2..0000000",
    "--- a/docs/old.txt",
    "+++ /dev/null",
    "@@ -1 +0,0 @@",
    "-old notes",
    "diff --git a/run.sh b/run.sh",
    "old mode 100644",
    "new mode 100755",
    "diff --git a/src/core_link.py b/src/core_link.py",
    "new file mode 120000",
    "index 0000000..a7e8eb8",
    "--- /dev/null",
    "+++ b/src/core_link.py",
    "@@ -0,0 +1 @@",
    "+pkg/core.py",
    "\\ No newline at end of file",
    "diff --git a/src/pkg/core.py b/src/pkg/core.py",
    "index cdc4b71..aa701cc 100644",
    "--- a/src/pkg/core.py",
    "+++ b/src/pkg/core.py",
    "@@ -1,5 +1,5 @@",
    " import os",
    " ",
    " ",
    "-def parse(text):",
    '-    return text.split(",")',
    '+def parse(text, sep=","):',
    "+    return [p.strip() for p in text.split(sep)]",
    "diff --git a/src/pkg/util.py b/src/pkg/helpers.py",
    "similarity index 76%",
    "rename from src/pkg/util.py",
    "rename to src/pkg/helpers.py",
    "index f170642..8a2b7ed 100644",
    "--- a/src/pkg/util.py",
    "+++ b/src/pkg/helpers.py",
    "@@ -3,4 +3,4 @@ def helper():",
    " ",
    " ",
    " def other():",
    "-    return 2",
    "+    return 3",
    "diff --git a/src/pkg/version.py b/src/pkg/version.py",
    "new file mode 100644",
    "index 0000000..5ce0602",
    "--- /dev/null",
    "+++ b/src/pkg/version.py",
    "@@ -0,0 +1 @@",
    '+VERSION = "1.2"',
)


def summary(section: FileDiff) -> tuple:
    return (section.old_path, section.new_path, section.added, section.removed, section.mode)


def test_split_diff_gives_each_file_its_paths_line_counts_and_mode():
    assert [summary(s) for s in split_diff(GIT_DIFF)] == [
        ("docs/old.txt", None, 0, 1, None),  # deleted: no new path
        ("run.sh", "run.sh", 0, 0, "100755"),  # mode change only: paths from the header
        (None, "src/core_link.py", 1, 0, "120000"),  # new symlink: no old path
        ("src/pkg/core.py", "src/pkg/core.py", 2, 2, None),
        ("src/pkg/util.py", "src/pkg/helpers.py", 1, 1, None),  # rename with an edit
        (None, "src/pkg/version.py", 1, 0, "100644"),
    ]


def test_path_is_the_path_left_behind_and_paths_lists_old_then_new_once():
    deleted, _chmod, _link, edited, renamed, created = split_diff(GIT_DIFF)
    assert [s.path for s in (deleted, renamed, created)] == ["docs/old.txt", "src/pkg/helpers.py", "src/pkg/version.py"]
    assert renamed.paths == ("src/pkg/util.py", "src/pkg/helpers.py")
    assert edited.paths == ("src/pkg/core.py",)
    assert deleted.paths == ("docs/old.txt",)
    assert created.paths == ("src/pkg/version.py",)


def test_only_a_mode_120000_section_is_a_symlink():
    assert [s.is_symlink for s in split_diff(GIT_DIFF)] == [False, False, True, False, False, False]


def test_each_section_text_starts_at_its_header():
    sections = split_diff(GIT_DIFF)
    assert sections[1].text == "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
    assert sections[2].text.endswith("+pkg/core.py\n\\ No newline at end of file\n")


def test_join_diff_of_split_diff_is_the_original_git_diff():
    assert join_diff(split_diff(GIT_DIFF)) == GIT_DIFF


def test_a_diff_without_final_newline_gets_one_in_its_last_section():
    text = GIT_DIFF.rstrip("\n")
    assert join_diff(split_diff(text)) == GIT_DIFF


def test_whitespace_only_text_is_an_empty_diff():
    assert split_diff("") == []
    assert split_diff("  \n\n") == []


def test_text_that_is_not_a_diff_raises_diff_parse_error():
    with pytest.raises(DiffParseError, match=r"^no 'diff --git' or '---/\+\+\+' file header found: this is not a unified diff$"):
        split_diff("I fixed the bug by changing parse() to strip spaces.\n")


def test_a_plain_unified_diff_without_git_headers_is_split_on_its_file_headers():
    text = lines(
        "--- a/setup.py\t2024-03-01 10:00:00.000000000 +0000",
        "+++ b/setup.py\t2024-03-01 10:05:00.000000000 +0000",
        "@@ -1 +1 @@",
        "-version='1.0'",
        "+version='1.1'",
        "--- a/README\t2024-03-01 10:00:00.000000000 +0000",
        "+++ b/README\t2024-03-01 10:05:00.000000000 +0000",
        "@@ -1 +1,2 @@",
        " Demo",
        "+More",
    )
    assert [summary(s) for s in split_diff(text)] == [
        ("setup.py", "setup.py", 1, 1, None),
        ("README", "README", 1, 0, None),
    ]


def test_hunk_lines_that_look_like_file_headers_are_counted_not_split_on():
    # Removing "-- i;" and adding "++ i;" gives lines that read like a ---/+++ header pair.
    text = lines(
        "--- a/counter.c",
        "+++ b/counter.c",
        "@@ -1,2 +1,2 @@",
        "--- i;",
        "+++ i;",
        " return i;",
    )
    assert [summary(s) for s in split_diff(text)] == [("counter.c", "counter.c", 1, 1, None)]


def test_the_signature_after_a_format_patch_diff_is_not_counted_as_a_removed_line():
    text = lines(
        "From 3f2a1b0c Mon Sep 17 00:00:00 2001",
        "Subject: [PATCH] Keep comments",
        "---",
        " q.sql | 2 +-",
        "",
        "diff --git a/q.sql b/q.sql",
        "index e7e5628..47e3a11 100644",
        "--- a/q.sql",
        "+++ b/q.sql",
        "@@ -1,2 +1,2 @@",
        "--- a comment",
        "+--- a comment",
        " keep",
        "-- ",
        "2.39.2",
    )
    assert [summary(s) for s in split_diff(text)] == [("q.sql", "q.sql", 1, 1, None)]


def test_a_form_feed_inside_a_source_line_does_not_split_the_line():
    text = lines(
        "diff --git a/m.py b/m.py",
        "--- a/m.py",
        "+++ b/m.py",
        "@@ -1,3 +1,3 @@",
        " a = 1",
        "-\f# section",
        "+\f# Section",
        " b = 2",
    )
    assert [summary(s) for s in split_diff(text)] == [("m.py", "m.py", 1, 1, None)]
    assert join_diff(split_diff(text)) == text


def test_no_newline_marker_between_removed_and_added_lines_keeps_counting():
    text = lines(
        "diff --git a/VERSION b/VERSION",
        "--- a/VERSION",
        "+++ b/VERSION",
        "@@ -1 +1,2 @@",
        "-1.0",
        "\\ No newline at end of file",
        "+1.1",
        "+dev",
    )
    assert [summary(s) for s in split_diff(text)] == [("VERSION", "VERSION", 2, 1, None)]


def test_git_quoted_non_ascii_paths_are_decoded():
    text = lines(
        'diff --git "a/docs/caf\\303\\251.md" "b/docs/caf\\303\\251.md"',
        "index 587be6b..3e75765 100644",
        '--- "a/docs/caf\\303\\251.md"',
        '+++ "b/docs/caf\\303\\251.md"',
        "@@ -1 +1 @@",
        "-x",
        "+new",
    )
    assert [summary(s) for s in split_diff(text)] == [("docs/café.md", "docs/café.md", 1, 1, None)]


def test_a_mode_change_of_a_path_with_spaces_takes_the_path_from_the_header():
    text = lines("diff --git a/my scripts/run.sh b/my scripts/run.sh", "old mode 100644", "new mode 100755")
    assert [summary(s) for s in split_diff(text)] == [("my scripts/run.sh", "my scripts/run.sh", 0, 0, "100755")]


def test_rename_lines_keep_a_top_level_directory_named_a():
    text = lines(
        "diff --git a/a/x.py b/a/y.py",
        "similarity index 100%",
        "rename from a/x.py",
        "rename to a/y.py",
    )
    assert [summary(s) for s in split_diff(text)] == [("a/x.py", "a/y.py", 0, 0, None)]


@pytest.mark.parametrize("path", ["src/pkg/core.py", "README", "docs/./guide.md", "a/b/../c.py", ".github/workflows/ci.yml"])
def test_safe_relative_path_accepts_paths_inside_the_repository(path):
    assert safe_relative_path(path) is True


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/etc/passwd",
        "../outside.py",
        "src/../../outside.py",
        "..",
        ".",
        ".git/hooks/pre-commit",
        "sub/.git/config",
        "./.git/HEAD",
        "src\\win.py",
        "nul\x00byte.py",
    ],
)
def test_safe_relative_path_rejects_absolute_escaping_and_git_paths(path):
    assert safe_relative_path(path) is False
