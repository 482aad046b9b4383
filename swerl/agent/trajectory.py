"""A trajectory: the exact token stream of one agent run, plus what happened at each turn.

Token layout (what the trainer consumes)::

    prompt_ids | reply_1 | suffix_1 | reply_2 | suffix_2 | ... | reply_n [| suffix_n]

``response_ids`` is everything after the prompt. ``action_mask[i]`` is 1 where the policy
sampled ``response_ids[i]`` (replies) and 0 where the environment or the chat template
put it (suffixes: end-of-turn markers, observations, generation prompts).
``logprobs[i]`` is the sampler's log-prob for action tokens and 0.0 elsewhere.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field


class ExitReason(str, Enum):
    """Why a trajectory ended."""

    submitted = "submitted"  # the agent ran `submit`
    max_turns = "max_turns"  # the turn budget ran out
    context_exceeded = "context_exceeded"  # the next turn would not fit in the context window
    timeout = "timeout"  # the per-trajectory wall-clock deadline passed
    format_errors = "format_errors"  # too many replies in a row without exactly one command
    # the run broke part way outside the policy's commands (the engine failed, the final diff could not be
    # read, a bug): retried by a rerun; evaluation counts it unresolved
    error = "error"
    # a command of the policy broke its sandbox (killed the runner, exhausted the container) after it acted:
    # the policy's doing, so it is scored as an unresolved run and never dropped as an infrastructure error
    sandbox_broken = "sandbox_broken"
    # the sandbox never started (or its tools could not be installed): the policy never acted, so the pair
    # is infrastructure-failed (see ``is_infra_failure``)
    infra_error = "infra_error"


# swerl.grading.results.FailureClass.INFRA_ERROR: grading's own sandbox failed, so there is no verdict
GRADE_INFRA_ERROR = "infra_error"


def is_infra_failure(exit_reason: str, grade_failure: str | None) -> bool:
    """A pair that got no fair run or no verdict for reasons outside the policy: its sandbox never started,
    or grading's sandbox failed. A rerun redoes it; no Pass@1 or training step may count it."""
    return exit_reason == ExitReason.infra_error.value or grade_failure == GRADE_INFRA_ERROR


class Turn(BaseModel):
    """One reply and its consequence."""

    index: int = Field(ge=0)
    reply: str = Field(description="The assistant content as decoded from the sampled ids.")
    command: str | None = Field(None, description="The parsed command; None on a format error.")
    format_error: str | None = Field(None, description="The format error shown to the model, if any.")
    observation: str = Field("", description="What the model was shown next, prompt line included.")
    exit_code: int | None = None
    timed_out: bool = False
    n_action_tokens: int = Field(0, ge=0)
    n_observation_tokens: int = Field(0, ge=0)
    finish_reason: str = Field("stop", description="'stop' (end-of-turn sampled, or the reply cut at its command's end) or "
                               "'length' (per-turn cap hit).")
    dropped_tokens: int = Field(0, ge=0, description="Ids sampled after the command's closing fence and dropped "
                                "(AgentConfig.end_reply_at_command): never in the context, never trained on.")
    generation_s: float = Field(0.0, ge=0)
    environment_s: float = Field(0.0, ge=0)
    policy_version: str = ""


class Trajectory(BaseModel):
    """Everything one (task, sample) run produced; one row of the rollout Parquet files."""

    instance_id: str
    sample_index: int = Field(ge=0)
    trajectory_id: str = Field(description="`<instance_id>/<sample_index>`; stable across reruns.")
    policy_version: str = Field(description="The weights that sampled this trajectory's first token.")
    model: str = ""
    engine: str = ""
    seed: int | None = None
    prompt_ids: list[int] = Field(default_factory=list)
    response_ids: list[int] = Field(default_factory=list)
    action_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    exact_ids: bool = Field(True, description="False when an HTTP engine returned text that had to be re-tokenized.")
    messages: list[dict] = Field(default_factory=list, description="The same conversation as chat messages, for reading and replay.")
    turns: list[Turn] = Field(default_factory=list)
    exit_reason: ExitReason
    error: str | None = None
    patch: str = Field("", description="`git diff` of the sandbox against base_commit when the run ended.")
    num_turns: int = Field(0, ge=0)
    generation_s: float = Field(0.0, ge=0)
    environment_s: float = Field(0.0, ge=0)
    wall_s: float = Field(0.0, ge=0, description="The agent run, from first prompt to final diff.")
    sandbox_s: float = Field(0.0, ge=0, description="Starting the sandbox, installing the tools, and removing it.")
    grading_s: float = Field(0.0, ge=0, description="Waiting for its verdict: its grading sandbox, or the grading of the "
                             "same patch it shares (0: not graded).")
    # filled by grading
    resolved: bool | None = None
    grade_failure: str | None = Field(None, description="The grader's FailureClass when graded.")
    tamper_flags: list[str] = Field(default_factory=list, description="Tamper signature classes grading found in the patch.")
    swebench_log_resolved: bool | None = Field(None, description="What swebench's grading functions said of the same "
                                               "grading log, before swerl's layers (None when no tests ran).")
    fail_to_pass_passed: int | None = None
    pass_to_pass_failed: int | None = None
    staleness: int | None = Field(None, ge=0, description="Versions between the oldest policy that sampled it (any turn) "
                                  "and the one its update starts from (0: on-policy); None when the rollout named no "
                                  "update (``RolloutConfig.trains_from``).")

    @property
    def infra_failed(self) -> bool:
        """See ``is_infra_failure``."""
        return is_infra_failure(self.exit_reason.value, self.grade_failure)

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def n_action_tokens(self) -> int:
        return sum(self.action_mask)
