"""The project's MLflow tags, the names and limits MLflow accepts, and filter strings.

Shared by the parts of ``Tracker`` (runs, datasets, logged models, registry); imports no
MLflow, so it is cheap to read the tag names.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

TAG_PIPELINE_ID = "swerl.pipeline_id"
TAG_KIND = "swerl.kind"
TAG_STAGE = "swerl.stage"
TAG_CHECKPOINT_PATH = "swerl.checkpoint_path"
TAG_CHECKPOINT_DIGEST = "swerl.checkpoint_digest"
TAG_STEP = "swerl.step"
TAG_MODEL_ID = "swerl.model_id"
# A model known by name only (a hub id, an endpoint's model): what identifies it
TAG_MODEL_REF = "swerl.model_ref"
# The full digest of a dataset input: MLflow's own digest column holds 36 characters
INPUT_TAG_DIGEST = "swerl.digest"

# MLflow's per-request limits (mlflow.utils.validation)
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_DATASET_DIGEST = 36
# Metric, param and tag names MLflow accepts (mlflow.utils.validation.validate_param_and_metric_name)
_BAD_KEY_CHARS = re.compile(r"[^\w.\- :/]")


def quote(value: str) -> str:
    """A string literal for an MLflow filter string. The parser has no escapes, so a value
    holding both quote characters cannot be searched for."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ValueError(f"{value!r} holds both ' and \", which MLflow filter strings cannot express")


def mlflow_key(name: str) -> str:
    """A metric, param or tag name MLflow accepts: '@' becomes '_at_' ('pass@1' ->
    'pass_at_1'), any other character outside letters, digits, ``_ - . : /`` and space '_'."""
    return _BAD_KEY_CHARS.sub("_", str(name).replace("@", "_at_"))


def str_dict(values: Mapping[str, Any] | None, convert=str) -> dict[str, str]:
    """``values`` with MLflow keys (``mlflow_key``) and string values (``convert``)."""
    return {mlflow_key(key): convert(value) for key, value in (values or {}).items()}


def tag_filter(tags: Mapping[str, str]) -> str:
    """A filter string matching entities that carry every one of ``tags``."""
    return " AND ".join(f"tags.`{key}` = {quote(value)}" for key, value in tags.items())


def param_str(value: Any) -> str:
    """A param's value as text; structured values as canonical JSON, so the same config
    always gives the same string."""
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def chunks(items: list, size: int) -> Iterator[list]:
    """``items`` in lists of at most ``size`` (MLflow's per-request limits)."""
    for i in range(0, len(items), size):
        yield items[i:i + size]


def now_ms() -> int:
    return int(time.time() * 1000)
