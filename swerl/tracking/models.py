"""Checkpoints as MLflow logged models, and the models runs used and measured, safe to rerun.

* a checkpoint folder becomes one logged model per (run, folder, content digest), recording
  the folder's path and digest, its weights copied only with ``log_weights``;
* a model a run used (the policy it evaluated or started training from) is one model input
  per (run, model); a folder or hub name that was never logged gets one external logged
  model, found again by content digest or name;
* a model's metrics are written once per (run, key, step), linked to the dataset measured on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import LoggedModel, LoggedModelInput, LoggedModelOutput, LoggedModelStatus, Metric
from mlflow.utils.mlflow_tags import MLFLOW_MODEL_IS_EXTERNAL

from swerl.tracking.keys import (
    MAX_DATASET_DIGEST,
    MAX_METRICS_PER_BATCH,
    TAG_CHECKPOINT_DIGEST,
    TAG_CHECKPOINT_PATH,
    TAG_MODEL_REF,
    TAG_STEP,
    chunks,
    mlflow_key,
    now_ms,
    param_str,
    quote,
    str_dict,
    tag_filter,
)
from swerl.tracking.lineage import CHECKPOINT_PATTERNS, tree_digest, tree_files
from swerl.tracking.runs import Runs

MODEL_TYPE = "hf-checkpoint"
# Logged model names may not contain these (mlflow.utils.validation._validate_logged_model_name)
_BAD_MODEL_NAME_CHARS = re.compile(r"[/:.%\"']")


def logged_model_name(name: str) -> str:
    """``name`` with the characters MLflow refuses in logged model names replaced by '-'."""
    cleaned = _BAD_MODEL_NAME_CHARS.sub("-", name).strip()
    if not cleaned:
        raise ValueError(f"checkpoint name {name!r} is empty")
    return cleaned


class LoggedModels(Runs):
    """Logged models: the checkpoints runs produce, the models they use, the metrics measured."""

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
            model_tags = str_dict(tags)
            model_tags.update({TAG_CHECKPOINT_PATH: str(folder), TAG_CHECKPOINT_DIGEST: digest})
            if step is not None:
                model_tags[TAG_STEP] = str(at)
            if not self.config.log_weights:
                model_tags[MLFLOW_MODEL_IS_EXTERNAL] = "true"
            model = self.client.create_logged_model(
                experiment_id, name=logged_model_name(name), source_run_id=run_id, tags=model_tags,
                params=str_dict(params, param_str), model_type=MODEL_TYPE,
            )
        elif tags:
            self.client.set_logged_model_tags(model.model_id, str_dict(tags))
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

    # -- internals ------------------------------------------------------------------------

    def _log_model_metrics(
        self, run_id: str, model: LoggedModel, metrics: Mapping[str, float | None], step: int,
        dataset: tuple[str, str] | None = None,
    ) -> None:
        # MLflow writes a model metric into the run's history too. Where the run already holds
        # the same value at this step, the entry is sent with that entry's timestamp: MLflow
        # then skips it as a duplicate row of the run and still records it on the model.
        # Another run (a second evaluation of the same model) logs its own entries.
        have = {(m.key, m.step) for m in model.metrics or [] if m.run_id == run_id}
        name, digest = (dataset[0], dataset[1][:MAX_DATASET_DIGEST]) if dataset else (None, None)
        values = {
            mlflow_key(key): float(value) for key, value in metrics.items()
            if value is not None and (mlflow_key(key), step) not in have
        }
        if not values:
            return
        with self._run_lock(run_id):
            now = now_ms()
            entries = []
            for key, value in values.items():
                history = self.client.get_metric_history(run_id, key)
                same = [m.timestamp for m in history if m.step == step and m.value == value]
                entries.append(Metric(key, value, same[0] if same else now, step, model_id=model.model_id,
                                      dataset_name=name, dataset_digest=digest))
                self._steps[(run_id, key)] = {m.step for m in history} | {step}
            for chunk in chunks(entries, MAX_METRICS_PER_BATCH):
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
            m for m in self._search_models(experiment_id, f"source_run_id = {quote(run_id)}")
            if m.tags.get(TAG_CHECKPOINT_PATH) == path and m.tags.get(TAG_CHECKPOINT_DIGEST) == digest
        ]
        return min(matches, key=lambda m: (m.creation_timestamp, m.model_id)) if matches else None

    def _find_model(self, identity: Mapping[str, str]) -> LoggedModel | None:
        # A model some run produced is the one to link, before an external stand-in; then the oldest
        matches = self._search_models(self.experiment_id, tag_filter(identity))
        return min(matches, key=lambda m: (m.source_run_id is None, m.creation_timestamp, m.model_id)) if matches else None
