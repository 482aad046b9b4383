"""MLflow tracking and lineage: pipeline and stage runs, metrics, datasets, checkpoints as
logged models, and the registered policy with its aliases.

``Tracker`` is imported on first use: ``import mlflow`` takes seconds, and configs and
digests are needed where nothing is logged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swerl.tracking.config import TrackingConfig
from swerl.tracking.lineage import file_digest, tasks_digest, tree_digest

if TYPE_CHECKING:
    from swerl.tracking.mlflow_tracker import Tracker

__all__ = ["TrackingConfig", "Tracker", "file_digest", "tasks_digest", "tree_digest"]


def __getattr__(name: str) -> Any:
    if name == "Tracker":
        from swerl.tracking.mlflow_tracker import Tracker

        return Tracker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
