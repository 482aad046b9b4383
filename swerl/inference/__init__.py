"""Inference engines: token ids in, sampled token ids and their log-probs out.

``make_engine(config)`` builds the engine an ``EngineConfig`` (hf | vllm | openai | scripted)
describes (an ``EngineSettings`` plus the policy's model); every engine samples as its ``SamplingConfig`` says, the same way.
"""

from swerl.inference.base import (
    EngineError,
    Generation,
    GenerationRequest,
    InferenceEngine,
    SamplingConfig,
)
from swerl.inference.config import EngineConfig, EngineSettings
from swerl.inference.factory import make_engine

__all__ = ["EngineConfig", "EngineError", "EngineSettings", "Generation", "GenerationRequest", "InferenceEngine", "SamplingConfig", "make_engine"]
