"""Split a git-style unified diff into per-file pieces, so each file can be kept or dropped.

Grading never trusts a diff as a whole: files the agent must not touch (tests, test
configuration, interpreter start-up hooks) are filtered out piece by piece.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DIFF_HEADER = re.compile(r"^diff --git (\S+) (\S+)$")
_HUNK_HEADER = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


class DiffParseError(ValueError):
    """The text is not a unified diff that git could apply."""


@dataclass(frozen=True)
class FileDiff:
    """One file's section of a diff."""

    old_path: str | None  # None when the file is created
    new_path: str | None  # None when the file is deleted
    text: str  # the whole section, header included, ending in a newline
    added: int
    removed: int
    mode: str | None  # new file mode or new mode line, e.g. "100644" or "120000"

    @property
    def path(self) -> str:
        """The path this section leaves behind (the old one for a deletion)."""
        return self.new_path or self.old_path or ""

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the section touches, old first; a path is listed once."""
        # dict.fromkeys, not a set: callers compare and print these, so the order must be stable
        return tuple(p for p in dict.fromkeys((self.old_path, self.new_path)) if p)

    @property
    def is_symlink(self) -> bool:
        return self.mode == "120000"


def _unquote(raw: str) -> str:
    """Undo git's C-style quoting ("a/caf\\303\\251.py"), which git uses for non-ASCII names."""
    if len(raw) < 2 or not (raw.startswith('"') and raw.endswith('"')):
        return raw
    body, out, i = raw[1:-1], bytearray(), 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567" and re.fullmatch(r"[0-7]{3}", body[i + 1 : i + 4]):
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
            if nxt in _C_ESCAPES:
                out.append(_C_ESCAPES[nxt])
                i += 2
                continue
        out.extend(c.encode("utf-8"))
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def _strip_prefix(raw: str) -> str | None:
    raw = _unquote(raw.strip())
    if raw == "/dev/null":
        return None
    if raw.startswith(("a/", "b/")):
        raw = raw[2:]
    return raw


def _header_paths(head: str) -> tuple[str | None, str | None] | None:
    """Old and new path from a ``diff --git`` line, or None when they cannot be told apart."""
    m = _DIFF_HEADER.match(head)
    if m:
        return _strip_prefix(m.group(1)), _strip_prefix(m.group(2))
    rest = head[len("diff --git ") :]
    quoted = re.fullmatch(r'("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)', rest)
    if quoted:
        return _strip_prefix(quoted.group(1)), _strip_prefix(quoted.group(2))
    # Unquoted names with spaces are ambiguous; git only writes them when both sides
    # are the same file, "a/<p> b/<p>", so the line splits in the middle.
    half = (len(rest) - 5) // 2
    if half > 0 and rest == f"a/{rest[2:2 + half]} b/{rest[2:2 + half]}":
        return rest[2 : 2 + half], rest[2 : 2 + half]
    return None


def _lines(text: str) -> list[str]:
    # Not str.splitlines: it also breaks on \f, \r, \x1c..., which occur inside source
    # lines (form feeds in Python files) and would cut a hunk line in two.
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


class _HunkReader:
    """Tracks how many lines of the current hunk are still to come, from its @@ header."""

    def __init__(self) -> None:
        self.old_left = self.new_left = 0
        self.unbounded = False  # a header without counts: the hunk runs while lines look like hunk lines

    @property
    def active(self) -> bool:
        return self.unbounded or self.old_left > 0 or self.new_left > 0

    def start(self, line: str) -> None:
        m = _HUNK_HEADER.match(line)
        if m is None:
            self.unbounded, self.old_left, self.new_left = True, 0, 0
            return
        self.unbounded = False
        self.old_left = 1 if m.group(1) is None else int(m.group(1))
        self.new_left = 1 if m.group(2) is None else int(m.group(2))

    def take(self, line: str) -> str | None:
        """Consume ``line`` if it belongs to the hunk; return its kind (' ', '+', '-') or None."""
        kind = line[:1]
        if kind == "\\":  # "\ No newline at end of file" may sit between a hunk's - and + lines
            return kind
        if line == "\n":  # a context line whose single space an editor stripped
            kind = " "
        if self.unbounded:
            if kind in ("+", "-", " "):
                return kind
            self.unbounded = False
            return None
        if kind == " " and self.old_left > 0 and self.new_left > 0:
            self.old_left, self.new_left = self.old_left - 1, self.new_left - 1
        elif kind == "-" and self.old_left > 0:
            self.old_left -= 1
        elif kind == "+" and self.new_left > 0:
            self.new_left -= 1
        else:
            self.old_left = self.new_left = 0  # a short hunk: stop counting rather than misread headers
            return None
        return kind


def split_diff(text: str) -> list[FileDiff]:
    """Split ``text`` into per-file sections; raise DiffParseError when it is not a diff.

    Accepts ``git diff`` output (``diff --git`` headers) and plain ``---``/``+++`` unified
    diffs. Whitespace-only text is an empty diff. Text before the first file header (a
    ``git format-patch`` message) is not part of any section.
    """
    if not text.strip():
        return []
    lines = _lines(text)
    git_style = any(line.startswith("diff --git ") for line in lines)
    starts: list[int] = []
    hunk = _HunkReader()
    for i, line in enumerate(lines):
        if hunk.active and hunk.take(line) is not None:
            continue  # a removed "-- x" line inside a hunk is not a file header
        if line.startswith("@@"):
            hunk.start(line)
            continue
        if git_style:
            is_header = line.startswith("diff --git ")
        else:
            is_header = line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
        if is_header:
            starts.append(i)
    if not starts:
        raise DiffParseError("no 'diff --git' or '---/+++' file header found: this is not a unified diff")
    sections = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        sections.append(_parse_section(lines[start:end]))
    return sections


def _parse_section(lines: list[str]) -> FileDiff:
    old_path: str | None = None
    new_path: str | None = None
    header: tuple[str | None, str | None] | None = None
    mode = None
    added = removed = 0
    hunk = _HunkReader()
    head = lines[0].rstrip("\n")
    is_git = head.startswith("diff --git ")
    if is_git:
        header = _header_paths(head)
    created = deleted = False
    for line in lines[1 if is_git else 0 :]:
        if hunk.active:
            kind = hunk.take(line)
            if kind is not None:
                added += kind == "+"
                removed += kind == "-"
                continue
        if line.startswith("\\"):
            continue  # "\ No newline at end of file"
        if line.startswith("@@"):
            hunk.start(line)
        elif line.startswith("--- "):
            old_path = _strip_prefix(line[4:].rstrip("\n").split("\t")[0])
        elif line.startswith("+++ "):
            new_path = _strip_prefix(line[4:].rstrip("\n").split("\t")[0])
        elif line.startswith(("new file mode ", "new mode ")):
            mode = line.split()[-1]
            created = created or line.startswith("new file")
        elif line.startswith("deleted file mode "):
            deleted = True
        elif line.startswith(("rename from ", "copy from ")):
            # rename/copy lines carry no a/ b/ prefix: a top-level "a/" directory is real
            old_path = _unquote(line.split(" ", 2)[2].rstrip("\n"))
        elif line.startswith(("rename to ", "copy to ")):
            new_path = _unquote(line.split(" ", 2)[2].rstrip("\n"))
    header_old, header_new = header if header else (None, None)
    if old_path is None and new_path is None and not created and not deleted:
        old_path, new_path = header_old, header_new  # mode-only or binary change
    if created and old_path is None and new_path is None:
        new_path = header_new
    if deleted and old_path is None:
        old_path = header_old
    if created:
        old_path = None
    if deleted:
        new_path = None
    if old_path is None and new_path is None:
        raise DiffParseError(f"cannot find the file names in diff section starting {lines[0].strip()!r:.100}")
    text = "".join(lines)
    if not text.endswith("\n"):
        text += "\n"
    return FileDiff(old_path=old_path, new_path=new_path, text=text, added=added, removed=removed, mode=mode)


def join_diff(sections: list[FileDiff]) -> str:
    return "".join(s.text for s in sections)
