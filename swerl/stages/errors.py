"""Errors a stage raises for input that no retry can fix."""

from __future__ import annotations


class StageInputError(ValueError):
    """The stage's input is wrong (bad task file, missing model, nothing to train on); the
    message names the input and the fix. Orchestrators must not retry it."""


class NothingToTrainError(StageInputError):
    """The data holds no learning signal (no resolved run for RFT; every DAPO group has equal
    rewards). A pipeline may carry the policy forward instead of failing."""
