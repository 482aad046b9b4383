"""How a policy is sampled, whatever the tasks: the engine that serves it, the agent it drives, the sandboxes it
acts in, how its patches are graded. One declaration for the runner (``RolloutConfig.sampler``), the stages, the CLI
and the Prefect forms."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerl.agent.loop import AgentConfig
from swerl.envs.docker_sandbox import DockerSandboxConfig
from swerl.envs.factory import SandboxConfig
from swerl.grading.grader import GradingConfig
from swerl.inference.base import SamplingConfig
from swerl.inference.config import EngineKind, VLLMServeConfig


def agent_sandbox() -> DockerSandboxConfig:
    """The default sandbox of an agent: docker, its commands over one long-lived runner (a few ms each)."""
    return DockerSandboxConfig(exec_channel=True)


class SamplerConfig(BaseModel):
    """How a policy is sampled, whatever the tasks: the engine that serves it, the agent it drives, the
    sandboxes it acts in. One declaration for the CLI, the stages and the Prefect forms."""

    model_config = ConfigDict(extra="forbid")

    engine: EngineKind = Field("hf", description="hf (transformers), vllm (in-process), openai (HTTP server), scripted "
                               "(replays gold patches).")
    base_url: str | None = Field(None, description="OpenAI-compatible server for engine openai, e.g. http://127.0.0.1:8000/v1. "
                                 "A stage whose model is a checkpoint folder reloads it into the server first, unless the "
                                 "server already serves it as the stage's policy version (serve_vllm's servers can).")
    serve: VLLMServeConfig | None = Field(None, description="Engine openai without base_url: the pipeline starts this vLLM "
                                          "server once for the run, on its starting policy, and stops it at the end.")
    served_model: str | None = Field(None, min_length=1, max_length=512, description="Engine openai: the name the server "
                                     "serves the policy under (its --served-model-name); None: the only model it lists.")
    torch_threads: int | None = Field(None, ge=1, le=1024, description="Engine hf on CPU: torch threads of its decoding "
                                      "thread (None: torch's default; 1 is fastest for a small model beside busy sandboxes).")
    demo: Literal["edit", "replace"] = Field("edit", description="Engine scripted: `edit` explores then edits the gold patch's "
                                             "lines; `replace` opens the file, replaces the smallest unique span, submits.")
    demo_give_up: float = Field(0.0, ge=0.0, le=1.0, description="Demo `replace`: the fraction of trajectories that submit "
                                "right after `open`, unfixed (a noisy demonstrator: the policy it teaches often stops short).")
    concurrency: int = Field(4, ge=1, le=4096, description="Trajectories (sandboxes) at once.")
    agent: AgentConfig = Field(default_factory=AgentConfig, description="The agent's limits (turns, context, reply length, "
                               "timeouts) and prompts.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="How tokens are drawn (the defaults are "
                                     "the unbiased training settings); its max_new_tokens is agent.max_new_tokens.")
    sandbox: SandboxConfig = Field(
        default_factory=agent_sandbox,
        description="The agent's sandboxes: docker (default; images built from the tasks), local (each task's "
        "repository from `repos` copied on this machine, no isolation, no grading: tests and laptops without "
        "Docker), or flaky (injected start failures around either).")
    max_infra_failure_rate: float = Field(
        0.2, ge=0.0, le=1.0,
        description="Most share of the stage's (task, sample) pairs that may fail for infrastructure (the sandbox "
        "never started, or grading's sandbox failed); above it the stage raises InfraFailureRate (retryable), and "
        "its rerun redoes only those pairs. 0: any such failure fails the stage.")
    host_lost_retries: int = Field(1, ge=0, le=10, description="Runs again, within the stage, of a pair whose sandbox's "
                                   "host was lost (a pool's Docker host died): a fresh sandbox on a live host. 0: left "
                                   "infra_error, for a rerun.")
    grading: GradingConfig = Field(default_factory=GradingConfig, description="How each trajectory's patch is graded: "
                                   "the tests' time limit, canaries, test user, tripwire, the grading sandboxes' limits "
                                   "(log_dir None: the stage's LOG_DIR/grading). Validation grades the gold patches so too.")
    grade_cache: Path | None = Field(None, description="A folder of grading verdicts shared by every stage that names it, "
                                     "keyed by task record, image, patch and grading settings: a patch graded once is not "
                                     "graded again (a pipeline uses RUN_DIR/grades). None: shared within a stage only.")

    @model_validator(mode="after")
    def _one_server(self) -> SamplerConfig:
        if self.serve is not None and (self.engine != "openai" or self.base_url):
            raise ValueError(f"serve starts a vLLM server for engine openai: it needs engine openai (not {self.engine}) and no "
                             f"base_url (given: {self.base_url!r}); give either serve or base_url")
        return self

    @model_validator(mode="after")
    def _one_reply_cap(self) -> SamplerConfig:
        # a form sends every field back, None included: only a cap actually set can disagree
        cap = self.sampling.max_new_tokens
        if "max_new_tokens" in self.sampling.model_fields_set and cap is not None and cap != self.agent.max_new_tokens:
            raise ValueError(f"sampling.max_new_tokens ({self.sampling.max_new_tokens}) differs from agent.max_new_tokens "
                             f"({self.agent.max_new_tokens}): the reply cap is agent.max_new_tokens; set that and leave "
                             "sampling.max_new_tokens unset")
        return self

    def engine_sampling(self) -> SamplingConfig:
        """The engine's sampling settings, with the agent's reply cap."""
        return self.sampling.model_copy(update={"max_new_tokens": self.agent.max_new_tokens})
