"""Reading predictions in SWE-bench's format (JSONL, or a JSON list / dict keyed by instance_id)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from swerl.grading.results import Prediction


def read_predictions(path: Path) -> tuple[list[Prediction], list[str]]:
    """Return the valid predictions and one message per bad line (never raises on a bad line)."""
    if not path.is_file():
        raise FileNotFoundError(f"predictions file {path} does not exist")
    text = path.read_text()
    preds, bad = [], []
    if path.suffix == ".json":
        data = json.loads(text)
        rows = list(data.values()) if isinstance(data, dict) else data
        items = [(f"record {i}", r) for i, r in enumerate(rows, 1)]
    else:
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as e:
                bad.append(f"{path} line {n}: not valid JSON ({e.msg})")
    for where, row in items:
        try:
            preds.append(Prediction.model_validate(row))
        except ValidationError as e:
            fields = ", ".join(".".join(map(str, err["loc"])) or "record" for err in e.errors())
            bad.append(f"{path} {where}: bad or missing field(s) {fields}")
    return preds, bad
