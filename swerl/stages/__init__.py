"""The pipeline's stages as plain functions: build images, validate, roll out, evaluate, train.

Each takes one pydantic config (paths in, paths out), does its work resumably in its output
folder, and returns a small result. The CLI and the Prefect tasks (``tasks/``) are thin
wrappers over these; nothing here imports Prefect or MLflow.
"""

from swerl.stages.errors import StageInputError

__all__ = ["StageInputError"]
