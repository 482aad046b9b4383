"""Reading predictions in SWE-bench's format (JSONL, or a JSON list / dict keyed by instance_id).

A bad line is never graded as the agent's failure: a line that is not JSON, lacks
``instance_id`` or ``model_patch`` (a ``patch`` key is SWE-bench's gold field, not a
prediction's), or names an instance the task file does not hold is reported with its
line number and left out, so a typo cannot turn into a 0 reward or an infrastructure error.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from swerl.grading.results import Prediction


def read_predictions(path: Path, known_ids: Collection[str] | None = None) -> tuple[list[Prediction], list[str]]:
    """Return the valid predictions and one message per bad line (never raises on a bad line).

    With ``known_ids``, a prediction for any other instance is a bad line too.
    """
    text = path.read_text(encoding="utf-8", errors="replace")  # OSError (missing, a folder, unreadable) is the caller's to say
    preds: list[Prediction] = []
    bad: list[tuple[int, str]] = []  # (position, message): reported in file order
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            return [], [f"{path}: not valid JSON ({e.msg} at line {e.lineno})"]
        rows = list(data.values()) if isinstance(data, dict) else data if isinstance(data, list) else [data]
        items = [(i, f"record {i}", r) for i, r in enumerate(rows, 1)]
    else:
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append((n, f"line {n}", json.loads(line)))
            except json.JSONDecodeError as e:
                bad.append((n, f"{path} line {n}: not valid JSON ({e.msg})"))
    for n, where, row in items:
        problem = _problem(row, known_ids)
        if problem:
            bad.append((n, f"{path} {where}: {problem}"))
            continue
        try:
            preds.append(Prediction.model_validate(row))
        except ValidationError as e:
            fields = ", ".join(".".join(map(str, err["loc"])) or "record" for err in e.errors())
            bad.append((n, f"{path} {where}: bad field(s) {fields}"))
    return preds, [message for _, message in sorted(bad)]


def _problem(row: Any, known_ids: Collection[str] | None) -> str | None:
    if not isinstance(row, dict):
        return f"expected a JSON object with instance_id and model_patch, got {type(row).__name__}"
    iid = row.get("instance_id")
    if not isinstance(iid, str) or not iid.strip():
        return "bad or missing field(s) instance_id (each prediction names the task it answers)"
    if "model_patch" not in row:
        if "patch" in row:
            return ("has 'patch' but no 'model_patch': SWE-bench predictions carry the diff as model_patch "
                    "('patch' is a task's gold patch); rename the key")
        return "bad or missing field(s) model_patch (the diff to grade; null for no patch)"
    if row["model_patch"] is not None and not isinstance(row["model_patch"], str):
        return f"model_patch must be a diff string or null, got {type(row['model_patch']).__name__}"
    if known_ids is not None and iid not in known_ids:
        return f"instance_id {iid!r} is not in the task file (check the --tasks file or the id)"
    return None
