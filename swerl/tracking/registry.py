"""The registered model: checkpoints' logged models as its versions, and its aliases.

A logged model is registered once; aliases move to the version they are set on. MLflow's
``mlflow.register_model`` uses the global client, and the SQL registry resolves a
``models:/<model_id>`` source through the global tracking URI, so a version's source here
is the logged model's artifact location and its model id is kept in a ``swerl.model_id``
tag (the SQL registry also drops the ``model_id`` field).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow.entities import LoggedModel
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import (
    INVALID_PARAMETER_VALUE,
    RESOURCE_ALREADY_EXISTS,
    RESOURCE_DOES_NOT_EXIST,
    ErrorCode,
)
from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

from swerl.tracking.keys import (
    TAG_CHECKPOINT_DIGEST,
    TAG_CHECKPOINT_PATH,
    TAG_MODEL_ID,
    TAG_STEP,
    quote,
    str_dict,
)
from swerl.tracking.runs import Runs

_NOT_FOUND = {ErrorCode.Name(RESOURCE_DOES_NOT_EXIST), ErrorCode.Name(INVALID_PARAMETER_VALUE)}


class Registry(Runs):
    """Versions and aliases of ``config.registered_model``."""

    def register(self, model_id: str, *, aliases: Sequence[str] = ("candidate",), tags: Mapping[str, Any] | None = None) -> str:
        """Register the logged model under ``config.registered_model`` (created when missing)
        and point each alias at it; returns the version. A model registered before keeps its
        version (``tags`` are added to it)."""
        name = self.config.registered_model
        self._ensure_registered_model()
        version = self._version_of(model_id)
        if version is None:
            model = self.client.get_logged_model(model_id)
            version_tags = str_dict(tags)
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
            for key, value in str_dict(tags).items():
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
        for key, value in str_dict(tags).items():
            self.client.set_model_version_tag(self.config.registered_model, str(version), key, value)

    # -- internals ------------------------------------------------------------------------

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
            f"name = {quote(name)} AND tags.`{TAG_MODEL_ID}` = {quote(model_id)}"
        )
        return str(min(int(v.version) for v in versions)) if versions else None

    def _record_version_on_model(self, model: LoggedModel, version: str) -> None:
        # What mlflow.register_model writes, so the UI links the logged model to its versions
        entry = {"name": self.config.registered_model, "version": version}
        current = self.client.get_logged_model(model.model_id).tags.get(MLFLOW_MODEL_VERSIONS)
        listed = json.loads(current) if current else []
        if entry not in listed:
            self.client.set_logged_model_tags(model.model_id, {MLFLOW_MODEL_VERSIONS: json.dumps(listed + [entry])})
