"""How a policy is sampled, whatever the tasks: the engine that serves it, the agent it drives, the sandboxes it
acts in, how its patches are graded. One declaration for the runner (``RolloutConfig.sampler``), the stages, the CLI
and the Prefect forms."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

from pydantic import (BaseModel, ConfigDict, Field, SerializationInfo, SerializerFunctionWrapHandler, field_validator,
                      model_serializer, model_validator)

from swerl.agent.loop import AgentConfig
from swerl.envs.docker_sandbox import DockerSandboxConfig
from swerl.envs.factory import SandboxConfig
from swerl.grading.grader import GradingConfig
from swerl.inference.base import SamplingConfig
from swerl.inference.config import EngineKind, EngineSettings, HFEngineSettings, VLLMServeConfig


def agent_sandbox() -> DockerSandboxConfig:
    """The default sandbox of an agent: docker, its commands over one long-lived runner (a few ms each)."""
    return DockerSandboxConfig(exec_channel=True)


def _or_a_bare_kind(schema: dict[str, Any]) -> None:
    """The engine's JSON schema (Prefect's forms and its server's parameter check) takes the bare kind too: a sampler
    at the engine's defaults is written as one (``engine: hf``)."""
    union = {key: schema.pop(key) for key in ("oneOf", "anyOf", "discriminator", "$ref") if key in schema}
    schema["anyOf"] = [union, {"type": "string", "enum": list(get_args(EngineKind))}]


class SamplerConfig(BaseModel):
    """How a policy is sampled, whatever the tasks: the engine that serves it, the agent it drives, the
    sandboxes it acts in. One declaration for the CLI, the stages and the Prefect forms."""

    model_config = ConfigDict(extra="forbid")

    engine: EngineSettings = Field(
        default_factory=HFEngineSettings,
        description="The engine that serves the policy, tagged by `kind`: hf (transformers), vllm (in-process), openai (HTTP "
        "server), scripted (replays gold patches), with its settings (the stage adds the policy's model). A bare kind is "
        "short for its defaults: `engine: scripted` is `engine: {kind: scripted}`.", json_schema_extra=_or_a_bare_kind)
    serve: VLLMServeConfig | None = Field(None, description="Engine openai without engine.base_url: the pipeline starts this vLLM "
                                          "server once for the run, on its starting policy, and stops it at the end.")
    concurrency: int = Field(4, ge=1, le=4096, description="Trajectories (sandboxes) at once.")
    agent: AgentConfig = Field(default_factory=AgentConfig, description="The agent's limits (turns, reply length, timeouts; "
                               "its token budget is engine.max_context) and prompts.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="How tokens are drawn (the defaults are "
                                     "the unbiased training settings); a reply's cap is agent.max_new_tokens.")
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
                                   "(grading_logs None: the stage's LOG_DIR/grading). Validation grades the gold patches so too.")
    reuse_grades: bool = Field(True, description="Grade each distinct (task, patch) once per stage and give its repeats "
                               "the same verdict (False: every trajectory graded in its own sandbox, e.g. to measure "
                               "grading itself).")
    grade_cache: Path | None = Field(None, description="A folder of grading verdicts shared by every stage that names it, "
                                     "keyed by task record, image, patch and grading settings: a patch graded once is not "
                                     "graded again (a pipeline uses RUN_DIR/grades). None: shared within a stage only.")

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_shorthand(cls, value: Any) -> Any:
        """A bare kind (``engine: scripted``, ``SamplerConfig(engine="vllm")``) is that engine's defaults; settings
        without a kind are the default engine's (hf)."""
        if isinstance(value, str):
            return {"kind": value}
        if isinstance(value, Mapping) and "kind" not in value:
            return {"kind": "hf", **value}
        return value

    @model_serializer(mode="wrap")
    def _engine_dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        # with exclude_defaults (a run's fingerprint, MLflow params): the engine's kind is kept, and an engine at its
        # kind's defaults is the bare kind, as a sampler recorded its engine before the engine had settings here
        data = handler(self)
        if info.exclude_defaults and isinstance(data, dict) and isinstance(data.get("engine"), dict):
            data["engine"] = {"kind": self.engine.kind, **data["engine"]} if data["engine"] else self.engine.kind
        return data

    @model_validator(mode="after")
    def _one_server(self) -> SamplerConfig:
        base_url = getattr(self.engine, "base_url", None)
        if self.serve is not None and (self.engine.kind != "openai" or base_url):
            raise ValueError(f"serve starts a vLLM server for engine openai: it needs engine openai (not {self.engine.kind}) "
                             f"and no engine.base_url (given: {base_url!r}); give either serve or engine.base_url")
        return self

    @model_validator(mode="after")
    def _reply_fits_the_context(self) -> SamplerConfig:
        context = self.engine.max_model_len if self.engine.kind == "vllm" else self.engine.max_context
        if context is not None and self.agent.max_new_tokens >= context:
            name = "engine.max_model_len" if self.engine.kind == "vllm" else "engine.max_context"
            raise ValueError(f"agent.max_new_tokens ({self.agent.max_new_tokens}) must be below {name} ({context}): a reply "
                             f"has to fit in the context beside its prompt; lower agent.max_new_tokens or raise {name}")
        return self

    @property
    def give_up(self) -> float:
        """The share of trajectories the demonstrator gives up unfixed: engine scripted's ``give_up``; 0 for a policy."""
        return self.engine.give_up if self.engine.kind == "scripted" else 0.0
