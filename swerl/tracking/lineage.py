"""Content digests that identify what a run consumed and produced, the same on every machine.

Pure functions (no MLflow import), so data loaders and trainers can fingerprint their inputs
and outputs cheaply:

* ``file_digest``: sha256 of a file's bytes;
* ``tree_digest``: sha256 over the sorted ``(relative posix path, file sha256)`` pairs of the
  files under a folder that match glob patterns (recursive); absolute paths, modification
  times and file system order do not enter it;
* ``tasks_digest``: sha256 over the sorted canonical JSON of a task set, so the same tasks in
  another order or another file format give the same digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# What identifies a Hugging Face model folder's weights and architecture. Tokenizer files are
# copied unchanged from the source model, and trainer_state/ is resume state, not the model.
CHECKPOINT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "*config.json")


def file_digest(path: str | Path) -> str:
    """sha256 hex digest of the file's bytes."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def tree_files(path: str | Path, pattern: str | Sequence[str] = "*") -> list[Path]:
    """Files under ``path`` (recursive) whose names match any of the glob patterns, sorted by
    their relative posix path."""
    root = Path(path)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a folder")
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    found = {p for pat in patterns for p in root.rglob(pat) if p.is_file()}
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def tree_digest(path: str | Path, pattern: str | Sequence[str] = "*") -> str:
    """sha256 over ``"<relative posix path>\\0<file sha256>\\n"`` for each matching file, in
    sorted path order. A folder with no matching file digests to sha256 of nothing."""
    root = Path(path)
    h = hashlib.sha256()
    for f in tree_files(root, pattern):
        h.update(f"{f.relative_to(root).as_posix()}\0{file_digest(f)}\n".encode())
    return h.hexdigest()


def canonical_json(record: Any) -> str:
    """One task as canonical JSON: sorted keys, no whitespace, UTF-8 kept as is."""
    data = record.model_dump(mode="json") if hasattr(record, "model_dump") else record
    if not isinstance(data, Mapping):
        raise TypeError(f"a task must be a pydantic model or a mapping, got {type(record).__name__}")
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# what swerl learns about a task and writes beside it (validation's gold statuses): the same records carry
# it or not depending on whether the run validated them, so it is no part of what the task set is
ANNOTATIONS = frozenset({"gold_statuses"})


def tasks_digest(tasks: Iterable[Any]) -> str:
    """sha256 of the tasks' canonical JSON lines (swerl's ``ANNOTATIONS`` left out), sorted and joined by
    newlines: the same task records give the same dataset wherever they are logged (a pipeline's
    validated held-out set and the nightly evaluation of the same file).

    Sorting makes the digest independent of the order tasks were loaded in; duplicates count
    (a set with a task twice trains on it twice)."""
    lines = sorted(canonical_json(_published(t)) for t in tasks)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _published(record: Any) -> Any:
    data = record.model_dump(mode="json") if hasattr(record, "model_dump") else record
    if not isinstance(data, Mapping):
        return data
    return {k: v for k, v in data.items() if k not in ANNOTATIONS}
