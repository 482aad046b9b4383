"""What one pipeline stage hands the next: typed results instead of dicts.

The training flows return a ``StageResult``, evaluations an ``EvalResult``; both carry the
``PolicyRef`` of the policy the stage produced (or carried forward). The ledger stores them
as JSON and reads them back as these models, so a resumed pipeline gets the same objects.
Their JSON keys are those of the dicts the flows returned before these models, so a ledger
written then reads as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from swerl.orchestration.summary import Behaviour


class PolicyRef(BaseModel):
    """One policy: where its weights are, the version its trajectories record, and its registry entry."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="Model folder or hub name the engines load.")
    policy_version: str = Field(description="The version recorded on every trajectory it samples ('0', 'rft', 'dapo-2').")
    model_id: str | None = Field(None, description="MLflow logged model of the checkpoint (None: not logged).")
    registered_version: str | None = Field(None, description="Version in the model registry (None: not registered).")

    @classmethod
    def of(cls, path: str, version: str, registered: Mapping[str, str] | None = None) -> PolicyRef:
        """The policy at ``path``; ``registered`` is what registering it returned ({"model_id", "version"})."""
        registered = registered or {}
        return cls(path=str(path), policy_version=version, model_id=registered.get("model_id"),
                   registered_version=registered.get("version"))

    def check_registered(self, registered_path: str, store: str | None) -> None:
        """Refuse a registry whose version of this policy names another checkpoint (RuntimeError naming both).

        A resumed run reads its policies from the ledger, and evaluates them by registry version:
        against another MLflow store (another ``tracking_uri``, a reset database) that number names
        whatever that store registered first, and the run would score the wrong weights without a word;
        after the run folder moved, it names the folder where the weights were.
        """
        if os.path.realpath(registered_path) != os.path.realpath(self.path):
            raise RuntimeError(
                f"policy {self.policy_version!r} of this run is {self.path}, registered as version {self.registered_version}; "
                f"version {self.registered_version} in the tracking store {store or '(default)'} is {registered_path}: "
                "the run folder moved, or the run was started against another MLflow store. Point tracking.tracking_uri (or "
                "MLFLOW_TRACKING_URI) back at that store and the folder back where it was, or start the run again in a new run folder")

    def model_arg(self) -> str:
        """What an evaluation is told to load: the registry version when there is one (lineage), else the path."""
        return f"version:{self.registered_version}" if self.registered_version else self.path


class StageResult(BaseModel):
    """A training stage (warm-start, RFT, a DAPO iteration): the policy after it and what it measured."""

    policy: PolicyRef = Field(description="The trained checkpoint, or the starting policy carried forward.")
    metrics: dict[str, float] = Field(default_factory=dict, description="rollout/, grading/, rft/ or data/, train/ figures.")
    run_id: str | None = Field(None, description="The stage's MLflow run.")
    trained: bool = Field(description="False: nothing to train on, the policy carried forward.")
    reason: str | None = Field(None, description="Why nothing was trained.")
    behaviour: Behaviour | None = Field(None, description="What the policy did in the stage's rollout (None: a "
                                        "ledger written before it was recorded; the summary then reads the rollout).")
    seconds: float | None = Field(None, ge=0, description="Wall time of the stage (set by the pipeline).")
    ran_on: list[str] = Field(default_factory=list, description="Where its rollout chunks ran: `dask:<worker>` on a Dask "
                              "cluster, else `<host>:<pid>` (sorted, each once).")


class EvalResult(BaseModel):
    """An evaluation stage: Pass@1 and friends of one policy."""

    policy: PolicyRef = Field(description="The evaluated policy.")
    metrics: dict[str, float] = Field(default_factory=dict, description="eval/ figures (eval/pass_at_1, ...).")
    run_id: str | None = Field(None, description="The evaluation's MLflow run.")
    promoted: bool | None = Field(None, description="Whether `champion` moved here (None: promotion off).")
    seconds: float | None = Field(None, ge=0, description="Wall time of the stage (set by the pipeline).")
