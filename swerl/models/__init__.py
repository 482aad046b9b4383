"""Policies swerl can make on its own: a tiny Qwen2-architecture model for CPU runs and tests."""

from swerl.models.tiny import TinyModelConfig, init_tiny

__all__ = ["TinyModelConfig", "init_tiny"]
