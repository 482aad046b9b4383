"""Every setting is declared once.

A setting name is declared -- with a default or a bound (ge/gt/le/lt) -- by exactly one config model; every other
component that takes the setting inherits that model (``swerl.util.settings.SeedSettings``, the sandboxes'
``ExecSettings``) or nests it (``sampler: SamplerConfig``). A second declaration is a hand copy, and copies drift: a
flow form that accepts 86400 s where the agent refuses more than 3600 s fails only after the images are built. Two
settings that mean different things get different names. There is no allow-list.

What counts as a declaration of a field: the class whose own annotations declare it (a field inherited from a base
is declared once, at the base; a subclass that declares it again is a second declaration). Not counted:

- a field whose type is a config model: it refers to that model's one declaration, and its default is a preset of
  it (``TrainParams(lr=1e-6)`` for DAPO, ``lr=5e-6`` for RFT);
- a union variant's tag: a one-value ``Literal`` that is its own default (``kind: Literal["docker"] = "docker"``);
- a required field without bounds (``tasks: Path`` of a stage): it is the caller's input, not a setting.

Config models are the pydantic models of ``swerl`` and ``flows`` named ``*Config``, ``*Settings``, ``*Objective``,
``*Params``, ``*Stage`` or ``*Common``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
import typing
from collections import defaultdict
from pathlib import Path

import annotated_types
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from swerl.util.config_reference import models_in

CONFIG_NAME = re.compile(r"(Config|Params|Stage|Common|Settings|Objective)$")
PACKAGES = ("swerl", "flows")


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


def _bounds(field: FieldInfo) -> dict[str, typing.Any]:
    out = {}
    for meta in field.metadata:
        for key in ("ge", "gt", "le", "lt"):
            value = getattr(meta, key, None)
            if value is not None and isinstance(meta, (annotated_types.BaseMetadata, annotated_types.Interval)):
                out[key] = value
    return out


def _is_tag(field: FieldInfo) -> bool:
    args = typing.get_args(field.annotation)
    return typing.get_origin(field.annotation) is typing.Literal and len(args) == 1 and field.default == args[0]


def is_setting(field: FieldInfo) -> bool:
    """Whether a field declares a setting: a default or a bound, not a nested config, not a variant's tag."""
    if models_in(field.annotation) or _is_tag(field):
        return False
    has_default = field.default is not PydanticUndefined or field.default_factory is not None
    return has_default or bool(_bounds(field))


def declaring_class(cls: type[BaseModel], name: str) -> type:
    """The class of ``cls``'s MRO whose own annotations declare the field ``name``."""
    return next(c for c in cls.__mro__ if name in c.__dict__.get("__annotations__", {}))


def declarations(models: typing.Iterable[type[BaseModel]]) -> dict[str, set[str]]:
    """Setting name -> the classes that declare it (module-qualified), over ``models`` and their bases."""
    found: dict[str, set[str]] = defaultdict(set)
    for cls in models:
        for name, field in cls.model_fields.items():
            if is_setting(field):
                owner = declaring_class(cls, name)
                found[name].add(f"{owner.__module__}.{owner.__qualname__}")
    return found


def declared_more_than_once(models: typing.Iterable[type[BaseModel]]) -> dict[str, list[str]]:
    return {name: sorted(owners) for name, owners in sorted(declarations(models).items()) if len(owners) > 1}


def test_the_walk_finds_the_config_models_of_every_layer():
    models = config_models()
    for expected in ("SamplerParams", "SamplerConfig", "TrainParams", "TrainSettings", "OptimizerConfig", "PipelineParams",
                     "RolloutStage", "RFTStage", "DAPOStage", "AgentConfig", "GradingConfig", "TrackingConfig",
                     "RewardConfig", "TrainerConfig", "SamplingConfig", "DockerSandboxConfig", "RolloutConfig",
                     "HFEngineConfig", "ImageConfig", "ValidationConfig", "CurriculumConfig"):
        assert expected in models


def test_no_setting_name_is_declared_by_two_config_models():
    found = declared_more_than_once(config_models().values())
    lines = [f"{name}:\n    " + "\n    ".join(owners) for name, owners in found.items()]
    assert not found, (f"{len(found)} setting name(s) declared by more than one config model: inherit (or nest) the one "
                       "declaration where the settings are the same, rename one where they differ:\n" + "\n".join(lines))


# The rule itself, on models made for it.

class _Seeded(BaseModel):
    seed: int = Field(0, ge=0)


class _InheritsTheSeed(_Seeded):
    name: str = "a"


class _SeedAgain(_Seeded):
    seed: int = Field(0, ge=0, le=10)  # a subclass re-declaring the inherited field: a second home


class _CopiesTheSeed(BaseModel):
    seed: int = 1


class _Tagged(BaseModel):
    kind: typing.Literal["a"] = "a"
    out: Path  # required, unbounded: the caller's input
    nested: _Seeded = Field(default_factory=lambda: _Seeded(seed=3))  # a preset of the one declaration


class _TaggedToo(BaseModel):
    kind: typing.Literal["b"] = "b"
    out: Path
    nested: _Seeded | None = None


def test_an_inherited_declaration_counts_once():
    assert declared_more_than_once([_Seeded, _InheritsTheSeed]) == {}


def test_a_copy_or_a_redeclaration_in_a_subclass_counts_twice():
    here = __name__
    assert declared_more_than_once([_InheritsTheSeed, _CopiesTheSeed]) == {
        "seed": [f"{here}._CopiesTheSeed", f"{here}._Seeded"]}
    assert declared_more_than_once([_Seeded, _SeedAgain]) == {"seed": [f"{here}._SeedAgain", f"{here}._Seeded"]}


def test_tags_required_inputs_and_nested_configs_are_not_settings():
    assert declared_more_than_once([_Tagged, _TaggedToo]) == {}
    assert not is_setting(_Tagged.model_fields["kind"]) and not is_setting(_Tagged.model_fields["out"])
    # a Literal with a choice is a setting
    class Choice(BaseModel):
        kind: typing.Literal["a", "b"] = "a"
    assert is_setting(Choice.model_fields["kind"])
