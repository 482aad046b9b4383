"""Runs, metrics, datasets, checkpoints and the model registry in MLflow 3, safe to rerun.

``Tracker`` is the one object callers hold; its parts each do one job:

* ``runs.Runs``: the client, the experiment, pipeline and stage runs, their tags, params,
  metrics and artifacts;
* ``datasets.Datasets``: the datasets a run used, as dataset inputs;
* ``models.LoggedModels``: checkpoints as logged models, the models a run used, their metrics;
* ``registry.Registry``: registered versions and their aliases.

Every write is get-or-create or skip-if-present, so a pipeline rerun after a crash continues
the same runs, models and versions instead of making new ones.

Lineage thus lives in MLflow's own links, walkable in the UI and with ``MlflowClient``: a
training run's dataset inputs (task set, images, trajectories) and model input (start
policy) -> its logged model output (``source_run_id``; metrics on the trajectories) -> the
registered version -> the evaluation run whose model input it is (metrics on the task set).

Everything goes through one ``MlflowClient`` bound to the configured URI, never the global
``mlflow`` state, so threads and processes with different settings can log side by side.
Two MLflow helpers are avoided for that reason: ``mlflow.create_external_model`` and
``mlflow.register_model`` use a global client.
"""

from __future__ import annotations

from swerl.tracking.datasets import Datasets
from swerl.tracking.models import LoggedModels
from swerl.tracking.registry import Registry


class Tracker(Datasets, LoggedModels, Registry):
    """The project's view of one MLflow experiment and one registered model."""
