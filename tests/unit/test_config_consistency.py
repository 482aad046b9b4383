"""Every setting is declared once.

A field name that two config models share must agree in type, bounds (ge/gt/le/lt) and
default: otherwise one of them is a hand copy that has drifted (a flow form that accepts
86400 s where the agent refuses more than 3600 s, fails only after the images are built).
A model that NESTS another (a field whose type is that model, at any depth) is not a copy,
and a field whose type is itself a config model is compared by type only: its default is
a preset of the one declared model (``TrainParams(lr=1e-6)`` for DAPO, ``lr=5e-6`` for RFT).

Config models are the pydantic models of ``swerl`` and ``flows`` named ``*Config``, ``*Settings``, ``*Objective``,
``*Params``, ``*Stage`` or ``*Common``. ``ALLOWED`` lists the names that mean more than one
setting: each setting a group of models with what it is; only declarations in different groups may differ.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import pkgutil
import re
import types
import typing
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from swerl.util.config_reference import models_in

CONFIG_NAME = re.compile(r"(Config|Params|Stage|Common|Settings|Objective)$")
PACKAGES = ("swerl", "flows")

# Field names that name more than one setting. Each setting is a group of models, with what it is: the
# declarations inside a group must agree, declarations in different groups may differ (the reason is the group's
# line), and every model that declares the field must be in one group.
ALLOWED: dict[str, dict[str, set[str]]] = {
    "seed": {
        "a base seed a user sets; numpy and torch take 32 bits": {
            "CurriculumConfig", "DAPOStage", "EvaluateParams", "PipelineParams", "RFTStage", "RolloutParams",
            "TinyModelConfig", "TrainCommon", "TrainerConfig"},
        "a rollout's sampling seed, None for unseeded (the CLI's --seed); the runner's own field": {
            "RolloutConfig", "RolloutStage"},
        "the engine's fallback base seed, None by default: requests carry the agent's per-turn seeds": {"SamplingConfig"},
        "vLLM's seed, a C int (31 bits)": {"VLLMEngineConfig"},
    },
    "concurrency": {
        "image builds (and validation sandboxes) at once, bounded by the Docker daemon": {
            "BuildImagesParams", "ImagesStage", "ValidationConfig"},
        "trajectories at once, one sandbox each": {"SamplerConfig", "SamplerParams"},
        "grading sandboxes at once per chunk of predictions": {"GradeParams"},
    },
    "tasks": {
        "a form's task file; None means the embedded demo tasks (or the curriculum's split)": {
            "BuildImagesParams", "EvaluateParams", "GradeParams", "PipelineParams", "RolloutParams", "WarmStartParams"},
        "a stage's task file, resolved by the flow": {"ImagesStage", "RolloutStage"},
    },
    "model": {
        "the policy a stage starts from, resolved by the flow": {"DAPOStage", "RFTStage", "RolloutStage", "TrainCommon"},
        "the policy a rollout form names (a folder, hub id or registry alias), required": {"RolloutParams"},
        "the policy an evaluation form scores, the registry's champion by default": {"EvaluateParams"},
        "the pipeline's starting policy; None creates the tiny model": {"PipelineParams"},
        "the weights an engine serves: a folder or hub id (openai: the served name)": {
            "HFEngineConfig", "OpenAIEngineConfig", "VLLMEngineConfig"},
        "the folder a pipeline's policy server starts on; None: the pipeline's starting policy": {"VLLMServeConfig"},
    },
    "out": {
        "a run folder the caller names": {"DAPOStage", "GradeParams", "RFTStage", "RolloutParams", "RolloutStage",
                                          "TrainCommon"},
        "the evaluations' parent folder; each run writes OUT/<label>-<time>": {"EvaluateParams"},
    },
    "samples": {
        "trajectories per task of a rollout (G, or k runs), one by default": {
            "RolloutConfig", "RolloutParams", "RolloutStage", "WarmStartParams"},
        "RFT's samples per task (more chances of a resolved run)": {"RFTParams"},
        "DAPO's group size G: a group advantage needs two": {"DAPOParams"},
    },
    "dtype": {
        "an engine's compute dtype (float16 serves well)": {"HFEngineConfig", "VLLMEngineConfig", "VLLMServeConfig",
                                                            "VLLMSettings"},
        "the trainer's compute dtype (no float16: there is no loss scaling)": {
            "TrainParams", "TrainSettings", "TrainerConfig", "TrainerSettings"},
    },
    "train": {
        "how a stage trains": {"DAPOParams", "DAPOStage", "RFTParams", "RFTStage", "TrainCommon", "WarmStartParams"},
        "the curriculum's number of training tasks": {"CurriculumConfig"},
    },
    "log_dir": {
        "the root of a stage's logs (LOG_DIR/builds, LOG_DIR/grading)": {"ImagesStage", "RolloutStage"},
        "the build logs' own folder": {"ImageConfig"},
        "grading's log folder; None keeps no logs": {"GradingConfig"},
    },
    "policy_version": {
        "the version a rollout records on every trajectory": {"RolloutStage"},
        "a rollout form's version; None takes the registry's (or '0')": {"RolloutParams"},
        "the only version training accepts; None accepts any": {"DAPOStage", "RFTStage", "TrainCommon"},
    },
    "max_context": {
        "the agent's token budget per trajectory (room for a prompt)": {"AgentConfig"},
        # swerl/inference is another change's: the two engines' bounds differ (no upper bound for hf), left to it
        "the hf engine's context window": {"HFEngineConfig"},
        "the OpenAI engine's context window": {"OpenAIEngineConfig"},
        "the scripted engine's window (None: unbounded; a demonstration needs no model)": {"ScriptedEngineConfig"},
    },
    "max_new_tokens": {
        "the reply cap: the agent's, which a rollout also gives the engine (SamplerConfig.engine_sampling)": {"AgentConfig"},
        "the engine's own cap (swerl/inference); a sampler refuses one set apart from agent.max_new_tokens": {
            "SamplingConfig"},
    },
    "weight_load_timeout_s": {
        # swerl/inference is another change's: hf has no upper bound, the OpenAI engine waits longer by default
        "the hf engine's load": {"HFEngineConfig"},
        "the OpenAI engine's: a server may still be loading": {"OpenAIEngineConfig"},
        "vLLM's in-process load": {"VLLMEngineConfig"},
    },
    "workdir": {
        "the agent's override; None takes the sandbox's": {"AgentConfig"},
        "the repository's path in a container (a Docker sandbox's, or a Kubernetes pod's)": {
            "ContainerSettings", "DockerSandboxConfig", "KubernetesSandboxConfig"},
        "the repository's folder name inside a local sandbox's copy": {"LocalSandboxConfig"},
    },
    "runs": {
        "k evaluation runs per task": {"EvalParams", "EvaluateParams"},
        "gold-patch runs per task when validating (flakiness)": {"ValidationConfig"},
    },
    "chunk_size": {
        "tasks per rollout task run; None: one chunk": {"SamplerParams"},
        "predictions per grading task run": {"GradeParams"},
    },
    "backend": {
        "the torch variant's tag of TrainerSettings.trainer": {"TorchTrainerConfig"},
        "the deepspeed variant's tag of TrainerSettings.trainer": {"DeepSpeedTrainerConfig"},
    },
    "kind": {
        "the docker variant's tag of SandboxConfig": {"DockerSandboxConfig"},
        "the local variant's tag of SandboxConfig": {"LocalSandboxConfig"},
        "the kubernetes variant's tag of SandboxConfig": {"KubernetesSandboxConfig"},
        "the flaky variant's tag of SandboxConfig": {"FlakySandboxConfig"},
        "the docker_hosts variant's tag of SandboxConfig": {"DockerHostsConfig"},
        "the hf variant's tag of EngineConfig": {"HFEngineConfig"},
        "the vllm variant's tag of EngineConfig": {"VLLMEngineConfig"},
        "the openai variant's tag of EngineConfig": {"OpenAIEngineConfig"},
        "the scripted variant's tag of EngineConfig": {"ScriptedEngineConfig"},
    },
    "max_concurrency": {
        "requests an openai engine keeps in flight": {"OpenAIEngineConfig"},
        "sandboxes alive at once on one Docker host of a pool": {"DockerHostConfig"},
    },
    "base_url": {
        "the server an openai engine talks to: required there": {"OpenAIEngineConfig"},
        "a sampler's server, set only with engine openai (the stage builds the engine's config from it)": {
            "SamplerConfig", "SamplerParams"},
    },
    "manifest": {
        "a deployment writes under runs/, its working folder": {"BuildImagesParams"},
        "the CLI's and a stage's default, under .swerl/": {"ImagesStage"},
    },
    "promote": {
        "a pipeline's evaluations promote a better checkpoint by default": {"EvalParams"},
        "a standalone evaluation promotes only when asked": {"EvaluateParams"},
    },
    "validate_runs": {
        "building images validates only when asked": {"BuildImagesParams"},
        "the pipeline validates its tasks once by default": {"PipelineParams"},
    },
}


def _group(name: str, model: str) -> str | None:
    return next((reason for reason, models in ALLOWED.get(name, {}).items() if model in models), None)


def _modules() -> list[types.ModuleType]:
    found = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if not info.name.endswith(".__main__"):  # running it is its import
                found.append(importlib.import_module(info.name))
    return found


def config_models() -> dict[str, type[BaseModel]]:
    """Every config model of the packages, by class name (names are unique: the test checks it)."""
    models: dict[str, type[BaseModel]] = {}
    for module in _modules():
        for name, cls in vars(module).items():
            if (inspect.isclass(cls) and issubclass(cls, BaseModel) and cls.__module__ == module.__name__
                    and CONFIG_NAME.search(name)):
                assert models.get(name, cls) is cls, f"two config models named {name}: {models[name]} and {cls}"
                models[name] = cls
    return models


def _type_key(tp: Any) -> Any:
    """A comparable form of an annotation: ``int | None`` and ``Optional[int]`` are equal, order of a union or Literal is not."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return ("union", frozenset(_type_key(a) for a in args))
    if origin is typing.Literal:
        return ("literal", frozenset(args))
    if origin is typing.Annotated:
        return _type_key(args[0])
    if origin is not None:
        return (origin, tuple(_type_key(a) for a in args))
    return tp


def _type_text(tp: Any) -> str:
    return re.sub(r"\b(typing|pathlib|swerl(\.\w+)*)\.", "", str(tp) if typing.get_origin(tp) else getattr(tp, "__name__", str(tp)))


def _bounds(field) -> dict[str, Any]:
    out = {}
    for meta in field.metadata:
        for key in ("ge", "gt", "le", "lt"):
            value = getattr(meta, key, None)
            if value is not None and isinstance(meta, (annotated_types.BaseMetadata, annotated_types.Interval)):
                out[key] = value
    return out


def _default(field) -> Any:
    if field.default_factory is not None:
        value = field.default_factory()
        return value.model_dump() if isinstance(value, BaseModel) else value
    return "<required>" if field.default is PydanticUndefined else field.default


def _same_models(a: frozenset, b: frozenset) -> bool:
    """Fields holding config models name the same declaration when each model of one is, or extends, one of the other's
    (a form's ``SamplerParams`` extends the stage's ``SamplerConfig`` with the flow's chunking)."""
    def covered(xs, ys):
        return all(any(issubclass(x, y) or issubclass(y, x) for y in ys) for x in xs)

    return covered(a, b) and covered(b, a)


@dataclass(frozen=True)
class Declaration:
    model: str
    type: Any
    type_text: str
    bounds: tuple
    default: Any
    is_model: bool  # the field's type is a config model: compared by type only

    def differs(self, other: Declaration) -> list[str]:
        if self.is_model and other.is_model:
            return [] if _same_models(self.type, other.type) else ["type"]
        if self.type != other.type:
            return ["type"]
        return [what for what, a, b in (("bounds", self.bounds, other.bounds), ("default", self.default, other.default))
                if a != b]

    def text(self) -> str:
        if self.is_model:
            return f"{self.model}: {self.type_text}"
        bounds = ", ".join(f"{k}={v}" for k, v in self.bounds)
        return f"{self.model}: {self.type_text}" + (f" [{bounds}]" if bounds else "") + f" = {self.default!r}"


def declarations(models: dict[str, type[BaseModel]]) -> dict[str, list[Declaration]]:
    by_name: dict[str, list[Declaration]] = defaultdict(list)
    for model_name, cls in sorted(models.items()):
        for name, field in cls.model_fields.items():
            held = set(models_in(field.annotation))
            # a nested model is a reference to its one declaration: `X` and `X | None` (None: inherit) name the same
            kind = frozenset(held) if held else _type_key(field.annotation)
            by_name[name].append(Declaration(model_name, kind, _type_text(field.annotation),
                                             tuple(sorted(_bounds(field).items())), _default(field), bool(held)))
    return by_name


def nested(models: dict[str, type[BaseModel]]) -> dict[str, set[str]]:
    """Model -> every config model it holds as a field, at any depth."""
    direct = {name: {m.__name__ for f in cls.model_fields.values() for m in models_in(f.annotation)}
              for name, cls in models.items()}
    reach: dict[str, set[str]] = {}
    for name in models:
        seen, todo = set(), list(direct[name])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += direct.get(m, [])
        reach[name] = seen
    return reach


def drift() -> list[tuple[str, Declaration, Declaration, list[str]]]:
    """(field, a, b, what differs) for every pair of unrelated models that declare a field differently."""
    models = config_models()
    holds = nested(models)
    found = []
    for name, decls in sorted(declarations(models).items()):
        for a, b in itertools.combinations(decls, 2):
            if b.model in holds[a.model] or a.model in holds[b.model]:
                continue
            what = a.differs(b)
            if what:
                found.append((name, a, b, what))
    return found


def test_the_walk_finds_the_config_models_of_every_layer():
    models = config_models()
    for expected in ("SamplerParams", "SamplerConfig", "TrainParams", "TrainSettings", "OptimizerConfig", "PipelineParams",
                     "RolloutStage", "RFTStage", "DAPOStage", "AgentConfig",
                     "RewardConfig", "TrainerConfig", "SamplingConfig", "DockerSandboxConfig", "RolloutConfig"):
        assert expected in models


def test_a_field_name_means_one_declaration_across_config_models():
    found = [(name, a, b, what) for name, a, b, what in drift()
             if name not in ALLOWED or _group(name, a.model) == _group(name, b.model)]
    lines = [f"{name}: {'/'.join(what)} differ\n    {a.text()}\n    {b.text()}" for name, a, b, what in found]
    assert not found, (f"{len(found)} field(s) declared differently in two config models (nest one config in "
                       "both instead of copying it, or name the settings apart in ALLOWED):\n" + "\n".join(lines))


def test_every_model_that_declares_an_allowed_name_is_in_one_of_its_groups():
    decls = declarations(config_models())
    unplaced = {name: sorted(d.model for d in decls[name] if _group(name, d.model) is None) for name in ALLOWED}
    assert {name: models for name, models in unplaced.items() if models} == {}
    stale = {name: sorted(m for models in groups.values() for m in models if m not in {d.model for d in decls[name]})
             for name, groups in ALLOWED.items()}
    assert {name: models for name, models in stale.items() if models} == {}


def test_every_allowed_name_still_differs_across_its_groups():
    """An entry whose settings now agree is stale: remove it."""
    live = {name for name, a, b, _ in drift() if name in ALLOWED and _group(name, a.model) != _group(name, b.model)}
    assert sorted(set(ALLOWED) - live) == []
