"""Git-format diffs of one file, computed in Python (no repository needed).

The output is what ``git diff`` prints for a modified text file: ``diff --git``, an
``index`` line with the real abbreviated blob ids, and unified hunks with three lines of
context. Files are LF-terminated text, so the ``\\ No newline`` case never arises.
"""

from __future__ import annotations

import difflib
import hashlib

_MODE = "100644"


def blob_id(text: str) -> str:
    """The git blob id of ``text`` (what ``git hash-object`` prints)."""
    data = text.encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def file_diff(path: str, old: str, new: str, context: int = 3) -> str:
    """The ``git diff`` of ``path`` changing from ``old`` to ``new``; ValueError when equal."""
    if old == new:
        raise ValueError(f"no change to diff in {path}")
    for name, text in (("old", old), ("new", new)):
        if text and not text.endswith("\n"):
            raise ValueError(f"{path}: the {name} text must end with a newline")
    hunks = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 f"a/{path}", f"b/{path}", n=context)
    header = f"diff --git a/{path} b/{path}\nindex {blob_id(old)[:7]}..{blob_id(new)[:7]} {_MODE}\n"
    return header + "".join(hunks)
