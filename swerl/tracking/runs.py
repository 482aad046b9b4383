"""MLflow runs, safe to rerun: a pipeline's parent run, its stages' child runs, and their
tags, params, metrics and artifacts.

A pipeline is one parent run found by its ``swerl.pipeline_id`` tag; each stage is a child
run (``mlflow.parentRunId``) found by its ``swerl.stage`` tag. Every write is get-or-create
or skip-if-present, so a pipeline rerun after a crash continues the same runs instead of
making new ones:

* a run is looked up by its identity tags before one is created; when two processes race,
  the oldest run wins and the newer one is deleted;
* params are written once; the same value again is a no-op, another value a ValueError;
* a metric is written once per (key, step).

``Runs`` owns the one ``MlflowClient`` and the experiment; the other parts of ``Tracker``
(datasets, logged models, the registry) build on it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from swerl.tracking.config import TrackingConfig, sqlite_path
from swerl.tracking.keys import (
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_TAGS_PER_BATCH,
    TAG_KIND,
    TAG_PIPELINE_ID,
    TAG_STAGE,
    chunks,
    mlflow_key,
    now_ms,
    param_str,
    str_dict,
    tag_filter,
)

RUN_STATUSES = ("FINISHED", "FAILED", "KILLED")


class Runs:
    """Pipeline and stage runs of one MLflow experiment, through one ``MlflowClient``."""

    def __init__(self, config: TrackingConfig) -> None:
        config = self.config = config.resolved()
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
        params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None, kind: str = "pipeline",
    ) -> str:
        """The parent run of ``pipeline_id``, created on first use. A rerun gets the same run,
        back in RUNNING state, with ``tags`` added; ``params`` must not contradict earlier ones.
        ``kind`` (``swerl.kind``): ``pipeline``, or what a top-level run of one stage is (``evaluation``)."""
        identity = {TAG_PIPELINE_ID: pipeline_id, TAG_KIND: kind}
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
        running = self._search([self.experiment_id], f"{tag_filter(tags)} AND attributes.status = 'RUNNING'")
        for run in running:
            self.client.set_terminated(run.info.run_id, status=status)
        return [run.info.run_id for run in running]

    def child_runs(self, parent_run_id: str) -> list[Run]:
        """The runs whose parent is ``parent_run_id``, oldest first."""
        experiment_id = self.client.get_run(parent_run_id).info.experiment_id
        return self._search([experiment_id], tag_filter({MLFLOW_PARENT_RUN_ID: parent_run_id}))

    def run_url(self, run_id: str) -> str | None:
        """The run's page on the tracking server; None when the backend is a database."""
        uri = self.config.tracking_uri
        if urlparse(uri).scheme not in ("http", "https"):
            return None
        experiment_id = self.client.get_run(run_id).info.experiment_id
        return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"

    # -- tags, params, metrics, artifacts -------------------------------------------------

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        entries = [RunTag(key, value) for key, value in str_dict(tags).items()]
        for chunk in chunks(entries, MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, tags=chunk, synchronous=True)

    def log_metrics(self, run_id: str, metrics: Mapping[str, float | None], step: int | None = None) -> None:
        """Log each metric once per step; None values are skipped. MLflow records a metric
        without a step at step 0, so such a metric is logged once. Names go through
        ``mlflow_key`` ('pass@1' is logged as 'pass_at_1'), as do param and tag names."""
        at = 0 if step is None else int(step)
        values = {mlflow_key(key): float(value) for key, value in metrics.items() if value is not None}
        with self._run_lock(run_id):
            new = [key for key in values if at not in self._logged_steps(run_id, key)]
            timestamp = now_ms()
            entries = [Metric(key, values[key], timestamp, at) for key in new]
            for chunk in chunks(entries, MAX_METRICS_PER_BATCH):
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
        runs = self._search([experiment_id], tag_filter(identity))
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
        for key, text in str_dict(params, param_str).items():
            if key not in existing:
                new.append(Param(key, text))
            elif existing[key] != text:
                raise ValueError(
                    f"param {key!r} of run {run_id} was logged as {existing[key]!r}, now given as {text!r}: "
                    f"params are fixed once logged; use a new pipeline id to change them"
                )
        for chunk in chunks(new, MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, params=chunk, synchronous=True)

    def _run_lock(self, run_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(run_id, threading.Lock())

    def _logged_steps(self, run_id: str, key: str) -> set[int]:
        if (run_id, key) not in self._steps:
            self._steps[(run_id, key)] = {m.step for m in self.client.get_metric_history(run_id, key)}
        return self._steps[(run_id, key)]
