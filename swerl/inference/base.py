"""The InferenceEngine seam and the sampling settings every engine must honour.

Engines are token-in / token-out: the agent owns the tokenizer and the chat format, the
engine only continues a list of ids and reports, for every token it sampled, the log-prob
under the distribution it sampled from. For training that distribution is the model's
own softmax at temperature 1: no top-p, top-k, min-p or repetition penalty, whatever the
model's generation_config says (the paper's collapse came from a silent top-k).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class EngineError(RuntimeError):
    """The engine could not serve a request (not the model's fault): an infrastructure error."""


class SamplingConfig(BaseModel):
    """How tokens are drawn. The defaults are the unbiased training settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, gt=0, le=10, description="Softmax temperature; training requires 1.0.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus mass; 1.0 disables it (required for training).")
    top_k: int = Field(0, ge=0, description="Keep only the k most likely tokens; 0 disables it (required for training).")
    min_p: float = Field(0.0, ge=0, lt=1, description="Drop tokens below min_p x the top prob; 0 disables it.")
    repetition_penalty: float = Field(1.0, gt=0, le=10, description="1.0 disables it (required for training).")
    max_new_tokens: int = Field(1024, ge=1, le=1_000_000, description="Cap on sampled tokens per turn.")
    seed: int | None = Field(None, description="Base seed; each request derives its own from it and its request id.")

    @property
    def unbiased(self) -> bool:
        """True when sampling is from the model's own distribution, as the trainer's ratio assumes."""
        return (
            self.temperature == 1.0 and self.top_p == 1.0 and self.top_k == 0 and self.min_p == 0.0 and self.repetition_penalty == 1.0
        )


@dataclass(frozen=True)
class GenerationRequest:
    """Continue ``prompt_ids``; stop after any of ``stop_token_ids`` (kept in the output)."""

    request_id: str
    prompt_ids: list[int]
    max_new_tokens: int
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    trajectory_id: str = ""  # which agent run asks; lets a scripted policy answer per task
    turn: int = 0


@dataclass
class Generation:
    """What the sampler produced for one request."""

    request_id: str
    token_ids: list[int]
    logprobs: list[float]  # one per token_ids entry, under the sampling distribution
    finish_reason: Literal["stop", "length"]
    policy_version: str = ""
    exact_ids: bool = True  # False only when an HTTP server returned text that had to be re-tokenized
    extra: dict = field(default_factory=dict)


def completion_budget(request: GenerationRequest, max_context: int) -> int:
    """Tokens ``request`` may sample: its cap, cut to the context left; EngineError if none is left."""
    room = max_context - len(request.prompt_ids)
    if room < 1:
        raise EngineError(
            f"request {request.request_id}: prompt of {len(request.prompt_ids)} tokens leaves no room in the context of {max_context}"
        )
    return min(request.max_new_tokens, room)


@runtime_checkable
class InferenceEngine(Protocol):
    """Anything that samples continuations of token ids.

    ``generate`` is a coroutine so that many trajectories can wait on one engine; an
    implementation batches the requests that are pending together.
    """

    name: str
    policy_version: str  # tagged onto every Generation and every trajectory
    max_context: int  # prompt + completion tokens the model accepts

    async def generate(self, request: GenerationRequest) -> Generation: ...

    def load_weights(self, checkpoint_dir: str | Path, policy_version: str) -> None:
        """Serve the weights in ``checkpoint_dir`` from now on; raise EngineError if they cannot be loaded."""
        ...

    def close(self) -> None: ...
