"""The stage ledger: which stages of a pipeline run folder are finished, and what they produced.

A rerun of a crashed or cancelled pipeline reads it and skips every finished stage, so no
finished rollout, training step or MLflow iteration is redone. A stage is recorded only
after its work and its tracking are complete; a stage cut short is resumed by its own
mechanism (rollout stores skip stored pairs, training resumes from the newest step).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ValidationError

LEDGER_FILE = "ledger.json"

M = TypeVar("M", bound=BaseModel)


class LedgerError(ValueError):
    """A ledger entry that does not read as the result its stage produces."""


def _rebased(value: Any, old: str, new: str) -> Any:
    """``value`` with every string path at or under ``old`` moved under ``new``."""
    if isinstance(value, str):
        return new + value[len(old):] if value == old or value.startswith(old + "/") else value
    if isinstance(value, dict):
        return {k: _rebased(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebased(v, old, new) for v in value]
    return value


class Ledger:
    """``<run_dir>/ledger.json``: {stage: {"result": {...}, "finished_at": epoch seconds, "run_dir" and
    "run_dir_given": where it ran}}; atomic writes. A results' paths inside the run folder follow the folder when it is moved or
    copied: read back, they point into the folder the ledger is in now, never into the old place
    (where another run may live by then)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LEDGER_FILE
        self._lock = threading.Lock()

    def _where(self) -> dict[str, str]:
        """The run folder resolved and as given: a stage's results name their paths in either form (a
        relative run root, the default, gives relative ones)."""
        return {"run_dir": str(self.run_dir.resolve()), "run_dir_given": str(self.run_dir)}

    def _read(self) -> dict[str, Any]:
        if not self.path.is_file():
            return {}
        return json.loads(self.path.read_text(encoding="utf-8"))

    @overload
    def get(self, stage: str) -> dict[str, Any] | None: ...

    @overload
    def get(self, stage: str, as_type: type[M]) -> M | None: ...

    def get(self, stage: str, as_type: type[M] | None = None) -> dict[str, Any] | M | None:
        """The recorded result of a finished stage (as ``as_type`` when given), or None."""
        entry = self._read().get(stage)
        if not entry:
            return None
        result = entry["result"]
        for key, here in self._where().items():
            if entry.get(key) and entry[key] != here:
                result = _rebased(result, entry[key], here)
        if as_type is None:
            return result
        try:
            return as_type.model_validate(result)
        except ValidationError as e:
            raise LedgerError(f"{self.path}: the entry of stage {stage!r} does not read as a {as_type.__name__} "
                              f"({e.error_count()} error(s): {e.errors()[0]['loc']} {e.errors()[0]['msg']}); remove "
                              f"{stage!r} from {self.path} to rerun that stage, or start a new pipeline name") from e

    def finished(self) -> list[str]:
        return list(self._read())

    def record(self, stage: str, result: dict[str, Any] | BaseModel) -> None:
        """Mark ``stage`` finished with ``result`` (a model is stored as its JSON form)."""
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json")
        with self._lock:
            data = self._read()
            data[stage] = {"result": result, "finished_at": time.time(), **self._where()}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
            os.replace(tmp, self.path)
