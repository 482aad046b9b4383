"""The InferenceEngine seam and the sampling settings every engine must honour.

Engines are token-in / token-out: the agent owns the tokenizer and the chat format, the
engine only continues a list of ids and reports, for every token it sampled, the log-prob
under the distribution it sampled from. For training that distribution is the model's
own softmax at temperature 1: no top-p, top-k, min-p or repetition penalty, whatever the
model's generation_config says (the paper's collapse came from a silent top-k).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


class EngineError(RuntimeError):
    """The engine could not serve a request (not the model's fault): an infrastructure error."""


def _as_str(value: object) -> object:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


ModelRef = Annotated[str, BeforeValidator(_as_str), Field(min_length=1, max_length=4096)]
"""What an engine config names as its model: a local folder (a path, or a str) or a hub id such as ORG/NAME."""


class ContextSettings(BaseModel):
    """How many tokens an engine's sequences may hold."""

    max_context: int | None = Field(
        None, ge=16, le=100_000_000, description="Prompt + completion tokens; None: the model's own window (hf: its "
        "max_position_embeddings; openai: the server's max_model_len; scripted: 32768). The agent's budget too."
    )


class WeightLoadSettings(BaseModel):
    """How long an engine waits to swap in new weights."""

    weight_load_timeout_s: float = Field(
        900.0, gt=0, le=86_400, description="load_weights waits this long for in-flight requests (and the reload itself), "
        "then fails with EngineError."
    )


class SamplingConfig(BaseModel):
    """How tokens are drawn. The defaults are the unbiased training settings. A reply's length cap and seed are the
    request's own (``GenerationRequest``): a request without a seed is sampled unseeded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, gt=0, le=10, description="Softmax temperature; training requires 1.0.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus mass; 1.0 disables it (required for training).")
    top_k: int = Field(0, ge=0, description="Keep only the k most likely tokens; 0 disables it (required for training).")
    min_p: float = Field(0.0, ge=0, lt=1, description="Drop tokens below min_p x the top prob; 0 disables it.")
    repetition_penalty: float = Field(1.0, gt=0, le=10, description="1.0 disables it (required for training).")
    stop_token_ids: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        (), max_length=1024, description="Tokens that end every reply, besides the request's own stop tokens; kept in the output."
    )

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


@dataclass(frozen=True)
class RequestLimits:
    """How one request is sampled, the same way by every engine (``request_limits``)."""

    max_tokens: int  # tokens it may sample: the request's cap and the context left
    seed: int | None  # the request's seed (None: unseeded)
    stop_token_ids: tuple[int, ...]  # the request's stop tokens, then SamplingConfig's


def request_limits(request: GenerationRequest, sampling: SamplingConfig, max_context: int) -> RequestLimits:
    """What ``request`` may sample under ``sampling`` in a context of ``max_context`` tokens;
    EngineError when its prompt leaves no room."""
    room = max_context - len(request.prompt_ids)
    if room < 1:
        raise EngineError(
            f"request {request.request_id}: prompt of {len(request.prompt_ids)} tokens leaves no room in the context of {max_context}"
        )
    stops = tuple(dict.fromkeys((*request.stop_token_ids, *sampling.stop_token_ids)))
    return RequestLimits(max_tokens=min(request.max_new_tokens, room), seed=request.seed, stop_token_ids=stops)


@runtime_checkable
class InferenceEngine(Protocol):
    """Anything that samples continuations of token ids.

    ``generate`` is a coroutine so that many trajectories can wait on one engine; an
    implementation batches the requests that are pending together. Every engine samples a
    request as ``request_limits`` says: at most ``max_tokens`` tokens (finish reason
    ``length``), ending at the first of ``stop_token_ids`` (kept; finish reason ``stop``),
    seeded by ``seed`` (the same seed and prompt give the same reply), temperature and top-p
    from ``sampling``. ``close`` makes requests still pending fail with EngineError (or
    finish); none waits forever.
    """

    name: str
    policy_version: str  # tagged onto every Generation and every trajectory
    max_context: int  # prompt + completion tokens the model accepts
    sampling: SamplingConfig  # read as each request is submitted (``request_limits``): replacing it changes later requests

    async def generate(self, request: GenerationRequest) -> Generation: ...

    def load_weights(self, checkpoint_dir: str | Path, policy_version: str) -> None:
        """Serve the weights in ``checkpoint_dir`` from now on; raise EngineError if they cannot be loaded."""
        ...

    def close(self) -> None:
        """Stop serving: pending and later requests fail with EngineError; idempotent."""
        ...


@runtime_checkable
class SharedServerEngine(InferenceEngine, Protocol):
    """An engine whose weights live in a server other engines also use (the pipeline's policy server: its stages,
    and the Dask workers' rollout chunks): another client may have loaded a policy already."""

    def ensure_policy(self, checkpoint: str | Path, policy_version: str) -> bool:
        """Make the server serve ``checkpoint`` as ``policy_version``, reloading it only when it serves anything else
        (True: it reloaded); EngineError when it cannot."""
        ...
