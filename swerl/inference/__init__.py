"""Inference engines: token ids in, sampled token ids and their log-probs out."""

from swerl.inference.base import (
    EngineError,
    Generation,
    GenerationRequest,
    InferenceEngine,
    SamplingConfig,
)

__all__ = ["EngineError", "Generation", "GenerationRequest", "InferenceEngine", "SamplingConfig"]
