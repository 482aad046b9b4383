"""Datasets a run used, recorded by reference as MLflow dataset inputs (no data is copied).

A dataset input is written once per (name, digest) and run (MLflow dedupes it); its context
(training, evaluation, environment, ...) and full digest are input tags.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mlflow.data.dataset_source import DatasetSource
from mlflow.data.dataset_source_registry import register_dataset_source, resolve_dataset_source
from mlflow.data.http_dataset_source import HTTPDatasetSource
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import Dataset, DatasetInput, InputTag
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

from swerl.tracking.keys import INPUT_TAG_DIGEST, MAX_DATASET_DIGEST
from swerl.tracking.runs import Runs


def _input_tags(dataset_input: DatasetInput) -> dict[str, str]:
    return {t.key: t.value for t in dataset_input.tags}


class UriDatasetSource(DatasetSource):
    """A dataset known by a name or URI MLflow has no source type for (a hub id, ``hf://``)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    @staticmethod
    def _get_source_type() -> str:
        return "uri"

    def load(self) -> str:
        return self.uri

    @staticmethod
    def _can_resolve(raw_source: Any) -> bool:
        # Never claims a source: it is chosen explicitly, only when nothing else resolves
        return False

    @classmethod
    def _resolve(cls, raw_source: Any) -> UriDatasetSource:
        return cls(str(raw_source))

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri}

    @classmethod
    def from_dict(cls, source_dict: dict[Any, Any]) -> UriDatasetSource:
        return cls(source_dict["uri"])


# So mlflow.data.get_source() can read back what log_dataset wrote
register_dataset_source(UriDatasetSource)


def dataset_source(source: str | Path) -> DatasetSource:
    """The MLflow source of a dataset: a local path (made absolute), an http(s) URL, another
    URI MLflow knows (s3://, gs://, ...), or else the string as given."""
    text = str(source)
    scheme = urlparse(text).scheme
    if scheme in ("http", "https"):
        return HTTPDatasetSource(text)
    if not scheme:
        path = Path(text).expanduser()
        if not (path.exists() or path.is_absolute()):
            return UriDatasetSource(text)  # a name such as a Hugging Face hub id
        text = str(path.resolve())
    with warnings.catch_warnings():
        # "can be interpreted in multiple ways": the '' and 'file' schemes map to the same class
        warnings.simplefilter("ignore", UserWarning)
        try:
            return resolve_dataset_source(text)
        except MlflowException:
            return UriDatasetSource(text)


class Datasets(Runs):
    """The dataset inputs of runs."""

    def log_dataset(
        self, run_id: str, *, name: str, source: str | Path, digest: str, context: str,
        schema: dict | None = None, profile: dict | None = None,
    ) -> None:
        """Record a dataset the run used, by reference (no data is copied).

        ``context`` goes to the ``mlflow.data.context`` input tag (training, evaluation,
        environment, ...). MLflow keeps at most 36 characters of a digest, so the dataset's
        digest is the first 36 and the full one is the ``swerl.digest`` input tag. MLflow links
        a (name, digest) to a run once: logging it again, even with another context, is a no-op.
        """
        if not digest:
            raise ValueError(f"dataset {name!r} needs a digest")
        meta = MetaDataset(dataset_source(source), name=name, digest=digest[:MAX_DATASET_DIGEST]).to_dict()
        dataset = Dataset(
            name=meta["name"], digest=meta["digest"], source_type=meta["source_type"], source=meta["source"],
            schema=json.dumps(schema, sort_keys=True) if schema is not None else None,
            profile=json.dumps(profile, sort_keys=True) if profile is not None else None,
        )
        tags = [InputTag(MLFLOW_DATASET_CONTEXT, context), InputTag(INPUT_TAG_DIGEST, digest)]
        self.client.log_inputs(run_id, datasets=[DatasetInput(dataset, tags)])

    def share_datasets(self, run_id: str, from_run_id: str, *, contexts: Sequence[str]) -> dict[str, str]:
        """Log the dataset inputs of ``from_run_id`` whose context is one of ``contexts`` as
        inputs of ``run_id`` too (same name, digest, source and tags: a stage uses the images
        its pipeline built); returns their name -> full digest."""
        source = self.client.get_run(from_run_id)
        shared = [
            d for d in (source.inputs.dataset_inputs if source.inputs else [])
            if _input_tags(d).get(MLFLOW_DATASET_CONTEXT) in contexts
        ]
        if shared:
            self.client.log_inputs(run_id, datasets=[DatasetInput(d.dataset, d.tags) for d in shared])
        return {d.dataset.name: _input_tags(d).get(INPUT_TAG_DIGEST, d.dataset.digest) for d in shared}
