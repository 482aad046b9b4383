"""Runs, metrics, datasets, checkpoints and the model registry in MLflow 3, safe to rerun.

A pipeline is one parent run found by its ``swerl.pipeline_id`` tag; each stage is a child
run (``mlflow.parentRunId``) found by its ``swerl.stage`` tag. Every write is get-or-create
or skip-if-present, so a pipeline rerun after a crash continues the same runs instead of
making new ones:

* a run is looked up by its identity tags before one is created; when two processes race,
  the oldest run wins and the newer one is deleted;
* params are written once; the same value again is a no-op, another value a ValueError;
* a metric is written once per (key, step);
* a dataset input is written once per (name, digest) and run (MLflow dedupes it);
* a checkpoint folder becomes one logged model per (run, folder, content digest), recording
  the folder's path and digest, its weights copied only with ``log_weights``;
* a logged model is registered once; aliases move to the version they are set on;
* a model a run used (the policy it evaluated or started training from) is one model input
  per (run, model); a folder or hub name that was never logged gets one external logged
  model, found again by content digest or name;
* a model's metrics are written once per (run, key, step), linked to the dataset measured on.

Lineage thus lives in MLflow's own links, walkable in the UI and with ``MlflowClient``: a
training run's dataset inputs (task set, images, trajectories) and model input (start
policy) -> its logged model output (``source_run_id``; metrics on the trajectories) -> the
registered version -> the evaluation run whose model input it is (metrics on the task set).

Everything goes through one ``MlflowClient`` bound to the configured URI, never the global
``mlflow`` state, so threads and processes with different settings can log side by side.
Two MLflow helpers are avoided for that reason: ``mlflow.create_external_model`` and
``mlflow.register_model`` use a global client, and the SQL registry resolves a
``models:/<model_id>`` source through the global tracking URI, so a version's source here
is the logged model's artifact location and its model id is kept in a ``swerl.model_id``
tag (the SQL registry also drops the ``model_id`` field).
"""

from __future__ import annotations

import json
import re
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mlflow.data.dataset_source import DatasetSource
from mlflow.data.dataset_source_registry import register_dataset_source, resolve_dataset_source
from mlflow.data.http_dataset_source import HTTPDatasetSource
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import (
    Dataset,
    DatasetInput,
    InputTag,
    LoggedModel,
    LoggedModelInput,
    LoggedModelOutput,
    LoggedModelStatus,
    Metric,
    Param,
    Run,
    RunTag,
)
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import (
    INVALID_PARAMETER_VALUE,
    RESOURCE_ALREADY_EXISTS,
    RESOURCE_DOES_NOT_EXIST,
    ErrorCode,
)
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import (
    MLFLOW_DATASET_CONTEXT,
    MLFLOW_MODEL_IS_EXTERNAL,
    MLFLOW_MODEL_VERSIONS,
    MLFLOW_PARENT_RUN_ID,
)

from swerl.tracking.config import TrackingConfig, sqlite_path
from swerl.tracking.lineage import CHECKPOINT_PATTERNS, tree_digest, tree_files

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
MODEL_TYPE = "hf-checkpoint"

RUN_STATUSES = ("FINISHED", "FAILED", "KILLED")
# MLflow's per-request limits (mlflow.utils.validation)
_MAX_PARAMS_TAGS_PER_BATCH = 100
_MAX_METRICS_PER_BATCH = 1000
_MAX_DATASET_DIGEST = 36
# Logged model names may not contain these (mlflow.utils.validation._validate_logged_model_name)
_BAD_MODEL_NAME_CHARS = re.compile(r"[/:.%\"']")
# Metric, param and tag names MLflow accepts (mlflow.utils.validation.validate_param_and_metric_name)
_BAD_KEY_CHARS = re.compile(r"[^\w.\- :/]")
_NOT_FOUND = {ErrorCode.Name(RESOURCE_DOES_NOT_EXIST), ErrorCode.Name(INVALID_PARAMETER_VALUE)}


def _quote(value: str) -> str:
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


def _str_dict(values: Mapping[str, Any] | None, convert=str) -> dict[str, str]:
    return {mlflow_key(key): convert(value) for key, value in (values or {}).items()}


def _tag_filter(tags: Mapping[str, str]) -> str:
    return " AND ".join(f"tags.`{key}` = {_quote(value)}" for key, value in tags.items())


def _param_str(value: Any) -> str:
    # Structured values as canonical JSON, so the same config always gives the same string
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _input_tags(dataset_input: DatasetInput) -> dict[str, str]:
    return {t.key: t.value for t in dataset_input.tags}


def _now_ms() -> int:
    return int(time.time() * 1000)


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


def logged_model_name(name: str) -> str:
    """``name`` with the characters MLflow refuses in logged model names replaced by '-'."""
    cleaned = _BAD_MODEL_NAME_CHARS.sub("-", name).strip()
    if not cleaned:
        raise ValueError(f"checkpoint name {name!r} is empty")
    return cleaned


class Tracker:
    """The project's view of one MLflow experiment and one registered model."""

    def __init__(self, config: TrackingConfig) -> None:
        self.config = config
        db = sqlite_path(config.tracking_uri)
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=config.tracking_uri, registry_uri=config.tracking_uri)
        self.experiment_id: str = self._ensure_experiment()
        # Steps already logged per (run, metric key), read from the server once per key: a
        # resumed stage skips the steps its earlier attempt logged. One writer per run.
        self._steps: dict[tuple[str, str], set[int]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    # -- runs ---------------------------------------------------------------------------

    def pipeline_run(
        self, pipeline_id: str, *, name: str | None = None,
        params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None,
    ) -> str:
        """The parent run of ``pipeline_id``, created on first use. A rerun gets the same run,
        back in RUNNING state, with ``tags`` added; ``params`` must not contradict earlier ones."""
        identity = {TAG_PIPELINE_ID: pipeline_id, TAG_KIND: "pipeline"}
        run_id = self._get_or_create(self.experiment_id, identity, run_name=name or pipeline_id)
        self._log_params(run_id, params)
        self.set_tags(run_id, tags or {})
        self.client.update_run(run_id, status="RUNNING")
        return run_id

    def stage_run(
        self, parent_run_id: str, stage: str, *,
        params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None,
    ) -> str:
        """The child run of ``stage`` under ``parent_run_id`` (run name = stage), created on
        first use. A rerun gets the same run; an unfinished one goes back to RUNNING, while a
        FINISHED one stays FINISHED, so ``is_finished`` tells the caller it can be skipped."""
        parent = self.client.get_run(parent_run_id)
        identity = {MLFLOW_PARENT_RUN_ID: parent_run_id, TAG_STAGE: stage}
        extra = {TAG_KIND: "stage"}
        if pipeline_id := parent.data.tags.get(TAG_PIPELINE_ID):
            extra[TAG_PIPELINE_ID] = pipeline_id
        run_id = self._get_or_create(parent.info.experiment_id, identity, run_name=stage, extra_tags=extra)
        self._log_params(run_id, params)
        self.set_tags(run_id, tags or {})
        if not self.is_finished(run_id):
            self.client.update_run(run_id, status="RUNNING")
        return run_id

    def find_stage_run(self, parent_run_id: str, stage: str) -> str | None:
        """The child run of ``stage`` under ``parent_run_id`` if one exists; creates nothing."""
        experiment_id = self.client.get_run(parent_run_id).info.experiment_id
        found = self._find(experiment_id, {MLFLOW_PARENT_RUN_ID: parent_run_id, TAG_STAGE: stage})
        return found.info.run_id if found else None

    def is_finished(self, run_id: str) -> bool:
        return self.client.get_run(run_id).info.status == "FINISHED"

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        """End a run as FINISHED, FAILED or KILLED."""
        if status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
        self.client.set_terminated(run_id, status=status)

    def end_runs(self, tags: Mapping[str, str], status: str) -> list[str]:
        """End every RUNNING run of the experiment that carries ``tags`` as ``status`` (what a
        failed or cancelled flow does with the runs it opened); returns their ids."""
        if status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
        running = self._search([self.experiment_id], f"{_tag_filter(tags)} AND attributes.status = 'RUNNING'")
        for run in running:
            self.client.set_terminated(run.info.run_id, status=status)
        return [run.info.run_id for run in running]

    def child_runs(self, parent_run_id: str) -> list[Run]:
        """The runs whose parent is ``parent_run_id``, oldest first."""
        experiment_id = self.client.get_run(parent_run_id).info.experiment_id
        return self._search([experiment_id], _tag_filter({MLFLOW_PARENT_RUN_ID: parent_run_id}))

    def run_url(self, run_id: str) -> str | None:
        """The run's page on the tracking server; None when the backend is a database."""
        uri = self.config.tracking_uri
        if urlparse(uri).scheme not in ("http", "https"):
            return None
        experiment_id = self.client.get_run(run_id).info.experiment_id
        return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"

    # -- tags, params, metrics, artifacts -------------------------------------------------

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        entries = [RunTag(key, value) for key, value in _str_dict(tags).items()]
        for chunk in _chunks(entries, _MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, tags=chunk, synchronous=True)

    def log_metrics(self, run_id: str, metrics: Mapping[str, float | None], step: int | None = None) -> None:
        """Log each metric once per step; None values are skipped. MLflow records a metric
        without a step at step 0, so such a metric is logged once. Names go through
        ``mlflow_key`` ('pass@1' is logged as 'pass_at_1'), as do param and tag names."""
        at = 0 if step is None else int(step)
        values = {mlflow_key(key): float(value) for key, value in metrics.items() if value is not None}
        with self._run_lock(run_id):
            new = [key for key in values if at not in self._logged_steps(run_id, key)]
            timestamp = _now_ms()
            entries = [Metric(key, values[key], timestamp, at) for key in new]
            for chunk in _chunks(entries, _MAX_METRICS_PER_BATCH):
                self.client.log_batch(run_id, metrics=chunk, synchronous=True)
            for key in new:
                self._steps[(run_id, key)].add(at)

    def log_dict(self, run_id: str, data: dict, artifact_file: str) -> None:
        """``data`` as a JSON (or YAML, by extension) artifact of the run."""
        self.client.log_dict(run_id, data, artifact_file)

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        """Copy a file, or a folder's contents, into the run's artifacts."""
        path = Path(path)
        if path.is_dir():
            self.client.log_artifacts(run_id, str(path), artifact_path)
        elif path.is_file():
            self.client.log_artifact(run_id, str(path), artifact_path)
        else:
            raise FileNotFoundError(f"no file or folder at {path}")

    # -- datasets -------------------------------------------------------------------------

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
        meta = MetaDataset(dataset_source(source), name=name, digest=digest[:_MAX_DATASET_DIGEST]).to_dict()
        dataset = Dataset(
            name=meta["name"], digest=meta["digest"], source_type=meta["source_type"], source=meta["source"],
            schema=json.dumps(schema, sort_keys=True) if schema is not None else None,
            profile=json.dumps(profile, sort_keys=True) if profile is not None else None,
        )
        tags = [InputTag(MLFLOW_DATASET_CONTEXT, context), InputTag(INPUT_TAG_DIGEST, digest)]
        self.client.log_inputs(run_id, datasets=[DatasetInput(dataset, tags)])

    # -- checkpoints and the registry -----------------------------------------------------

    def log_checkpoint(
        self, run_id: str, checkpoint_dir: Path, *, name: str, step: int | None = None,
        params: Mapping[str, Any] | None = None, metrics: Mapping[str, float | None] | None = None,
        tags: Mapping[str, Any] | None = None, dataset: tuple[str, str] | None = None,
    ) -> str:
        """A logged model for a Hugging Face checkpoint folder, produced by ``run_id``.

        The model records the folder's resolved path (tag ``swerl.checkpoint_path``) and the
        digest of its weights and config files (``swerl.checkpoint_digest``); with
        ``log_weights`` the folder's top-level files (the model, not ``trainer_state/``) are
        copied into its artifacts, otherwise it has none and is tagged external. ``metrics``
        are logged on the model; MLflow puts them in the run's history at ``step`` too, unless
        the run already has that value there; ``dataset`` = (name, digest) of one of the run's
        dataset inputs links them to it (the trajectories a training loss was measured on).
        The model is an output of the run at ``step``.
        Logging the same folder with the same content from the same run again returns the
        same model id; new content in the folder makes a new model.
        """
        folder = Path(checkpoint_dir).resolve()
        if not folder.is_dir():
            raise FileNotFoundError(f"checkpoint folder {folder} does not exist")
        if not tree_files(folder, "*.safetensors"):
            raise ValueError(f"{folder} holds no *.safetensors file: not a Hugging Face checkpoint")
        digest = tree_digest(folder, CHECKPOINT_PATTERNS)
        at = 0 if step is None else int(step)
        run = self.client.get_run(run_id)
        experiment_id = run.info.experiment_id

        model = self._find_checkpoint_model(experiment_id, run_id, str(folder), digest)
        if model is None:
            model_tags = _str_dict(tags)
            model_tags.update({TAG_CHECKPOINT_PATH: str(folder), TAG_CHECKPOINT_DIGEST: digest})
            if step is not None:
                model_tags[TAG_STEP] = str(at)
            if not self.config.log_weights:
                model_tags[MLFLOW_MODEL_IS_EXTERNAL] = "true"
            model = self.client.create_logged_model(
                experiment_id, name=logged_model_name(name), source_run_id=run_id, tags=model_tags,
                params=_str_dict(params, _param_str), model_type=MODEL_TYPE,
            )
        elif tags:
            self.client.set_logged_model_tags(model.model_id, _str_dict(tags))
        model_id = model.model_id

        if model.status != LoggedModelStatus.READY:
            # New, or left PENDING by a crash: (re)copy the files, then mark it complete
            if self.config.log_weights:
                for f in sorted(p for p in folder.iterdir() if p.is_file()):
                    self.client.log_model_artifact(model_id, str(f))
            self._log_model_metrics(run_id, model, metrics or {}, at, dataset)
            self.client.finalize_logged_model(model_id, LoggedModelStatus.READY)
        else:
            self._log_model_metrics(run_id, model, metrics or {}, at, dataset)

        outputs = run.outputs.model_outputs if run.outputs else []
        if model_id not in {o.model_id for o in outputs}:
            self.client.log_outputs(run_id, [LoggedModelOutput(model_id=model_id, step=at)])
        return model_id

    def register(self, model_id: str, *, aliases: Sequence[str] = ("candidate",), tags: Mapping[str, Any] | None = None) -> str:
        """Register the logged model under ``config.registered_model`` (created when missing)
        and point each alias at it; returns the version. A model registered before keeps its
        version (``tags`` are added to it)."""
        name = self.config.registered_model
        self._ensure_registered_model()
        version = self._version_of(model_id)
        if version is None:
            model = self.client.get_logged_model(model_id)
            version_tags = _str_dict(tags)
            version_tags[TAG_MODEL_ID] = model_id
            for key in (TAG_CHECKPOINT_PATH, TAG_CHECKPOINT_DIGEST, TAG_STEP):
                if key in model.tags:
                    version_tags[key] = model.tags[key]
            created = self.client.create_model_version(
                name, source=model.artifact_location, run_id=model.source_run_id, tags=version_tags,
                run_link=self.run_url(model.source_run_id) if model.source_run_id else None, model_id=model_id,
            )
            # Two processes may both have registered it: the lowest version wins
            version = self._version_of(model_id) or str(created.version)
            if str(created.version) != version:
                self.client.delete_model_version(name, str(created.version))
            self._record_version_on_model(model, version)
        else:
            for key, value in _str_dict(tags).items():
                self.client.set_model_version_tag(name, version, key, value)
        for alias in aliases:
            self.set_alias(alias, version)
        return version

    def set_alias(self, alias: str, version: str) -> None:
        """Point ``alias`` of the registered model at ``version`` (moving it if set elsewhere)."""
        self.client.set_registered_model_alias(self.config.registered_model, alias, str(version))

    def alias_version(self, alias: str) -> str | None:
        """The version ``alias`` points at; None when the alias or the registered model is unset."""
        try:
            return str(self.client.get_model_version_by_alias(self.config.registered_model, alias).version)
        except MlflowException as e:
            if e.error_code in _NOT_FOUND:
                return None
            raise

    def checkpoint_for(self, alias_or_version: str) -> Path:
        """The checkpoint folder behind a version number or an alias of the registered model.
        The folder is not checked for existence: it may live on another machine's disk."""
        name = self.config.registered_model
        ref = str(alias_or_version)
        if ref.isdigit():
            version, what = ref, f"version {ref}"
        else:
            version, what = self.alias_version(ref), f"alias {ref!r}"
            if version is None:
                raise LookupError(
                    f"{what} is not set on registered model {name!r}: register a checkpoint "
                    f"(Tracker.register) or point the alias at a version (Tracker.set_alias)"
                )
        try:
            mv = self.client.get_model_version(name, version)
        except MlflowException as e:
            if e.error_code in _NOT_FOUND:
                raise LookupError(f"{what} of registered model {name!r} does not exist") from e
            raise
        path = mv.tags.get(TAG_CHECKPOINT_PATH)
        model_id = mv.tags.get(TAG_MODEL_ID) or mv.model_id
        if not path and model_id:
            path = self.client.get_logged_model(model_id).tags.get(TAG_CHECKPOINT_PATH)
        if not path:
            raise LookupError(
                f"{what} of registered model {name!r} (version {version}) records no checkpoint folder "
                f"(tag {TAG_CHECKPOINT_PATH}); it was not registered through Tracker.log_checkpoint"
            )
        return Path(path)

    def model_of_version(self, version: str) -> str | None:
        """The logged model id behind a version of the registered model."""
        mv = self.client.get_model_version(self.config.registered_model, str(version))
        return mv.tags.get(TAG_MODEL_ID) or mv.model_id

    def set_version_tags(self, version: str, tags: Mapping[str, Any]) -> None:
        """Set (or overwrite) tags of a version of the registered model."""
        for key, value in _str_dict(tags).items():
            self.client.set_model_version_tag(self.config.registered_model, str(version), key, value)

    # -- model lineage --------------------------------------------------------------------

    def reference_model(self, model: str | Path, *, name: str | None = None) -> str:
        """The logged model standing for a model the pipeline did not log itself, so a run
        that uses it can link it: a Hugging Face checkpoint folder is found by its content
        digest (the model a training run logged for it, when there is one), anything else (a
        hub id, an endpoint's model name) by the name. When none exists an external logged
        model without a source run is created, READY, named ``name`` or after the folder/name."""
        folder = Path(model).expanduser()
        if folder.is_dir() and tree_files(folder, "*.safetensors"):
            folder = folder.resolve()
            identity = {TAG_CHECKPOINT_DIGEST: tree_digest(folder, CHECKPOINT_PATTERNS)}
            tags = {**identity, TAG_CHECKPOINT_PATH: str(folder)}
            label = name or folder.name
        else:
            identity = {TAG_MODEL_REF: str(model)}
            tags = dict(identity)
            label = name or str(model)
        if found := self._find_model(identity):
            return found.model_id
        created = self.client.create_logged_model(
            self.experiment_id, name=logged_model_name(label), tags={**tags, MLFLOW_MODEL_IS_EXTERNAL: "true"},
            model_type=MODEL_TYPE,
        )
        self.client.finalize_logged_model(created.model_id, LoggedModelStatus.READY)
        # Another process may have created one meanwhile: the oldest wins
        winner = self._find_model(identity)
        if winner is not None and winner.model_id != created.model_id:
            self.client.delete_logged_model(created.model_id)
            return winner.model_id
        return created.model_id

    def log_model_input(self, run_id: str, model_id: str) -> None:
        """Record that the run used the logged model (the policy it evaluated or started
        training from); its page lists the model under its logged models, as an input."""
        run = self.client.get_run(run_id)
        used = run.inputs.model_inputs if run.inputs else []
        if model_id not in {m.model_id for m in used}:  # MLflow itself would add a second link
            self.client.log_inputs(run_id, models=[LoggedModelInput(model_id)])

    def log_model_metrics(
        self, run_id: str, model_id: str, metrics: Mapping[str, float | None], *, step: int | None = None,
        dataset: tuple[str, str] | None = None,
    ) -> None:
        """Metrics the run measured of the logged model: in the run's history and on the
        model's page (with the run), once per (run, key, step). ``dataset`` = (name, digest)
        of the run's dataset input they were measured on (the evaluation task set) links them
        to it; names go through ``mlflow_key``."""
        model = self.client.get_logged_model(model_id)
        self._log_model_metrics(run_id, model, metrics, 0 if step is None else int(step), dataset)

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

    # -- internals ------------------------------------------------------------------------

    def _ensure_experiment(self) -> str:
        name = self.config.experiment
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            try:
                return self.client.create_experiment(name, artifact_location=self.config.resolved_artifact_location())
            except MlflowException as e:
                if e.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                    raise
                experiment = self.client.get_experiment_by_name(name)  # created by a concurrent process
        if experiment.lifecycle_stage != "active":
            raise ValueError(
                f"MLflow experiment {name!r} is deleted; restore it (mlflow experiments restore "
                f"--experiment-id {experiment.experiment_id}) or choose another experiment name"
            )
        return experiment.experiment_id

    def _search(self, experiment_ids: list[str], filter_string: str) -> list[Run]:
        runs: list[Run] = []
        token = None
        while True:
            page = self.client.search_runs(
                experiment_ids, filter_string=filter_string, max_results=1000,
                order_by=["attributes.start_time ASC"], page_token=token,
            )
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def _find(self, experiment_id: str, identity: Mapping[str, str]) -> Run | None:
        runs = self._search([experiment_id], _tag_filter(identity))
        return min(runs, key=lambda r: (r.info.start_time, r.info.run_id)) if runs else None

    def _get_or_create(
        self, experiment_id: str, identity: Mapping[str, str], *, run_name: str,
        extra_tags: Mapping[str, str] | None = None,
    ) -> str:
        if found := self._find(experiment_id, identity):
            return found.info.run_id
        created = self.client.create_run(experiment_id, tags={**(extra_tags or {}), **identity}, run_name=run_name)
        # Another process may have created one between the search and now: the oldest wins
        winner = self._find(experiment_id, identity)
        if winner is not None and winner.info.run_id != created.info.run_id:
            self.client.delete_run(created.info.run_id)
            return winner.info.run_id
        return created.info.run_id

    def _log_params(self, run_id: str, params: Mapping[str, Any] | None) -> None:
        if not params:
            return
        existing = self.client.get_run(run_id).data.params
        new = []
        for key, text in _str_dict(params, _param_str).items():
            if key not in existing:
                new.append(Param(key, text))
            elif existing[key] != text:
                raise ValueError(
                    f"param {key!r} of run {run_id} was logged as {existing[key]!r}, now given as {text!r}: "
                    f"params are fixed once logged; use a new pipeline id to change them"
                )
        for chunk in _chunks(new, _MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, params=chunk, synchronous=True)

    def _run_lock(self, run_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(run_id, threading.Lock())

    def _logged_steps(self, run_id: str, key: str) -> set[int]:
        if (run_id, key) not in self._steps:
            self._steps[(run_id, key)] = {m.step for m in self.client.get_metric_history(run_id, key)}
        return self._steps[(run_id, key)]

    def _log_model_metrics(
        self, run_id: str, model: LoggedModel, metrics: Mapping[str, float | None], step: int,
        dataset: tuple[str, str] | None = None,
    ) -> None:
        # MLflow writes a model metric into the run's history too. Where the run already holds
        # the same value at this step, the entry is sent with that entry's timestamp: MLflow
        # then skips it as a duplicate row of the run and still records it on the model.
        # Another run (a second evaluation of the same model) logs its own entries.
        have = {(m.key, m.step) for m in model.metrics or [] if m.run_id == run_id}
        name, digest = (dataset[0], dataset[1][:_MAX_DATASET_DIGEST]) if dataset else (None, None)
        values = {
            mlflow_key(key): float(value) for key, value in metrics.items()
            if value is not None and (mlflow_key(key), step) not in have
        }
        if not values:
            return
        with self._run_lock(run_id):
            now = _now_ms()
            entries = []
            for key, value in values.items():
                history = self.client.get_metric_history(run_id, key)
                same = [m.timestamp for m in history if m.step == step and m.value == value]
                entries.append(Metric(key, value, same[0] if same else now, step, model_id=model.model_id,
                                      dataset_name=name, dataset_digest=digest))
                self._steps[(run_id, key)] = {m.step for m in history} | {step}
            for chunk in _chunks(entries, _MAX_METRICS_PER_BATCH):
                self.client.log_batch(run_id, metrics=chunk, synchronous=True)

    def _search_models(self, experiment_id: str, filter_string: str) -> list[LoggedModel]:
        """The experiment's logged models matching ``filter_string``, except FAILED ones."""
        found: list[LoggedModel] = []
        token = None
        while True:
            page = self.client.search_logged_models([experiment_id], filter_string=filter_string, page_token=token)
            found.extend(m for m in page if m.status != LoggedModelStatus.FAILED)
            token = page.token
            if not token:
                return found

    def _find_checkpoint_model(self, experiment_id: str, run_id: str, path: str, digest: str) -> LoggedModel | None:
        matches = [
            m for m in self._search_models(experiment_id, f"source_run_id = {_quote(run_id)}")
            if m.tags.get(TAG_CHECKPOINT_PATH) == path and m.tags.get(TAG_CHECKPOINT_DIGEST) == digest
        ]
        return min(matches, key=lambda m: (m.creation_timestamp, m.model_id)) if matches else None

    def _find_model(self, identity: Mapping[str, str]) -> LoggedModel | None:
        # A model some run produced is the one to link, before an external stand-in; then the oldest
        matches = self._search_models(self.experiment_id, _tag_filter(identity))
        return min(matches, key=lambda m: (m.source_run_id is None, m.creation_timestamp, m.model_id)) if matches else None

    def _ensure_registered_model(self) -> None:
        name = self.config.registered_model
        try:
            self.client.get_registered_model(name)
        except MlflowException as e:
            if e.error_code != ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
                raise
            try:
                self.client.create_registered_model(name)
            except MlflowException as e2:
                if e2.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                    raise

    def _version_of(self, model_id: str) -> str | None:
        """The lowest version of the registered model made from ``model_id``, if any."""
        name = self.config.registered_model
        versions = self.client.search_model_versions(
            f"name = {_quote(name)} AND tags.`{TAG_MODEL_ID}` = {_quote(model_id)}"
        )
        return str(min(int(v.version) for v in versions)) if versions else None

    def _record_version_on_model(self, model: LoggedModel, version: str) -> None:
        # What mlflow.register_model writes, so the UI links the logged model to its versions
        entry = {"name": self.config.registered_model, "version": version}
        current = self.client.get_logged_model(model.model_id).tags.get(MLFLOW_MODEL_VERSIONS)
        listed = json.loads(current) if current else []
        if entry not in listed:
            self.client.set_logged_model_tags(model.model_id, {MLFLOW_MODEL_VERSIONS: json.dumps(listed + [entry])})
