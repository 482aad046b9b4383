"""What every swerl task shares: which failures deserve a retry, concurrency tags, tracker access."""

from __future__ import annotations

from typing import Any

from swerl.stages.errors import RetryableStageError, StageInputError

# tag-based concurrency limits (`prefect concurrency-limit create sandbox 8`) bound these
TAG_IMAGE_BUILD = "image-build"
TAG_SANDBOX = "sandbox"
TAG_GPU = "gpu"


def _infrastructure(exc: BaseException) -> bool:
    """Docker, network and engine-server failures may pass; bad input or a bug never does."""
    import docker.errors
    import httpx
    import requests

    from swerl.envs.docker_client import DockerUnavailableError

    if isinstance(exc, StageInputError):
        return False
    if isinstance(exc, RetryableStageError):  # the stage kept what it finished; a rerun resumes it
        return True
    return isinstance(exc, (DockerUnavailableError, docker.errors.APIError, ConnectionError, TimeoutError,
                            httpx.TransportError, requests.ConnectionError))


def retry_on_infrastructure(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry only when the failure is an infrastructure error."""
    try:
        state.result()
    except Exception as exc:  # noqa: BLE001 - the state's own exception, classified below
        return _infrastructure(exc)
    return False


def retry_on_tracking_failure(task: Any, task_run: Any, state: Any) -> bool:
    """Retry MLflow calls that failed on the way (server down, database busy), not ones MLflow
    refused (a bad name or value fails the same way every time)."""
    try:
        state.result()
    except Exception as exc:  # noqa: BLE001 - the state's own exception, classified below
        from mlflow.exceptions import MlflowException

        if isinstance(exc, MlflowException):
            return exc.error_code not in ("INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST",
                                          "BAD_REQUEST", "INVALID_STATE")
        return not isinstance(exc, (StageInputError, ValueError, LookupError, TypeError, KeyError))
    return False


def tracker(tracking: Any):
    """A ``Tracker`` for a flow's ``TrackingConfig`` (its tracking URI resolved here, where the task runs)."""
    from swerl.tracking import Tracker

    return Tracker(tracking)
