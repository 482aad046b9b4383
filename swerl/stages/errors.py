"""Errors a stage raises: input that no retry can fix, and failures a rerun can."""

from __future__ import annotations


class StageInputError(ValueError):
    """The stage's input is wrong (bad task file, missing model, nothing to train on); the
    message names the input and the fix. Orchestrators must not retry it."""


class NothingToTrainError(StageInputError):
    """The data holds no learning signal (no resolved run for RFT; every DAPO group has equal
    rewards). A pipeline may carry the policy forward instead of failing."""


class RetryableStageError(RuntimeError):
    """The stage failed for a reason outside its input (lost sandboxes, a daemon down) and kept
    what it finished; a rerun resumes it. Orchestrators retry it and must not mark the stage done."""


class InfraFailureRate(RetryableStageError):
    """More of the stage's (task, sample) pairs failed for infrastructure than its bound allows
    (``max_infra_failure_rate``); a rerun redoes only those pairs."""

    def __init__(self, message: str, *, failed: int, total: int, bound: float) -> None:
        super().__init__(message)
        self.failed, self.total, self.bound = failed, total, bound

    def __reduce__(self):  # keyword payload survives pickling (Prefect keeps a task's exception)
        return _rebuild_infra_failure_rate, (str(self), self.failed, self.total, self.bound)


def _rebuild_infra_failure_rate(message: str, failed: int, total: int, bound: float) -> InfraFailureRate:
    return InfraFailureRate(message, failed=failed, total=total, bound=bound)
