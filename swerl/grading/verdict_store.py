"""Verdicts kept on disk by content: one JSON file per key, written atomically.

Two caches use it: task validation (a task set validated once is not graded again) and the
grades of a pipeline's rollouts (a patch graded in one stage is not graded again in a later
one). Both key a verdict by everything it depends on, so a hit is the verdict a fresh
grading would reach; a verdict touched by an infrastructure error is never stored.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel

from swerl.data.task import Task

M = TypeVar("M", bound=BaseModel)


class JsonVerdictStore(Generic[M]):
    """``root/<key[:2]>/<key>.json`` holding one ``model``; concurrent or crashed writers never leave half a file."""

    def __init__(self, root: Path, model: type[M]):
        self.root = Path(root)
        self.model = model

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> M | None:
        try:
            return self.model.model_validate_json(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # absent or unreadable: grade again
            return None

    def put(self, key: str, verdict: M) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{id(verdict)}.tmp")
        tmp.write_text(verdict.model_dump_json(), encoding="utf-8")
        os.replace(tmp, path)


def grading_settings(grading: BaseModel) -> str:
    """A grading config as the JSON a verdict depends on: not where logs go, not which run labels the sandboxes."""
    settings = grading.model_dump(mode="json", exclude={"grading_logs"})
    settings.get("sandbox", {}).pop("run_id", None)
    for host in settings.get("sandbox", {}).get("hosts") or []:  # a pool's bound, under the name verdicts were keyed by
        host["max_concurrency"] = host.pop("max_sandboxes")
    return json.dumps(settings, sort_keys=True)


def content_key(namespace: str, task: Task, image: str, *parts: str) -> str:
    """sha256 over a namespace, the whole task record, the image tag and the other parts, each NUL-terminated."""
    h = hashlib.sha256(namespace.encode() + b"\0")
    for part in (task.model_dump_json(), image, *parts):
        h.update(part.encode("utf-8", "surrogateescape"))
        h.update(b"\0")
    return h.hexdigest()
