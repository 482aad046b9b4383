"""Every setting is declared once.

A field name that two config models share must agree in type, bounds (ge/gt/le/lt) and
default: otherwise one of them is a hand copy that has drifted (a flow form that accepts
86400 s where the agent refuses more than 3600 s, fails only after the images are built).
A model that NESTS another (a field whose type is that model, at any depth) is not a copy,
and a field whose type is itself a config model is compared by type only: its default is
a preset of the one declared model (``TrainParams(lr=1e-6)`` for DAPO, ``lr=5e-6`` for RFT).

Config models are the pydantic models of ``swerl`` and ``flows`` named ``*Config``,
``*Params``, ``*Stage`` or ``*Common``. ``ALLOWED`` lists the pairs that may differ, each
with the reason: a different concept under the same name, never a copy.
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

CONFIG_NAME = re.compile(r"(Config|Params|Stage|Common)$")
PACKAGES = ("swerl", "flows")

# (field, model, model) -> why the two may differ; the models in alphabetical order
ALLOWED: dict[tuple[str, str, str], str] = {}


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


def _models_in(tp: Any) -> set[type[BaseModel]]:
    """The config models an annotation names, through unions, containers and Annotated."""
    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        return {tp}
    return set().union(*(_models_in(a) for a in typing.get_args(tp))) if typing.get_args(tp) else set()


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


@dataclass(frozen=True)
class Declaration:
    model: str
    type: Any
    type_text: str
    bounds: tuple
    default: Any
    is_model: bool  # the field's type is a config model: compared by type only

    def differs(self, other: Declaration) -> list[str]:
        if self.type != other.type:
            return ["type"]
        if self.is_model or other.is_model:
            return []
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
            held = _models_in(field.annotation)
            # a nested model is a reference to its one declaration: `X` and `X | None` (None: inherit) name the same
            kind = frozenset(held) if held else _type_key(field.annotation)
            by_name[name].append(Declaration(model_name, kind, _type_text(field.annotation),
                                             tuple(sorted(_bounds(field).items())), _default(field), bool(held)))
    return by_name


def nested(models: dict[str, type[BaseModel]]) -> dict[str, set[str]]:
    """Model -> every config model it holds as a field, at any depth."""
    direct = {name: {m.__name__ for f in cls.model_fields.values() for m in _models_in(f.annotation)}
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
    for expected in ("AgentParams", "TrainParams", "PipelineParams", "RolloutStage", "RFTStage", "DAPOStage", "AgentConfig",
                     "RewardConfig", "TrainerConfig", "SamplingConfig", "DockerSandboxConfig", "RolloutConfig"):
        assert expected in models


def test_a_field_name_means_one_declaration_across_config_models():
    found = [(name, a, b, what) for name, a, b, what in drift() if (name, a.model, b.model) not in ALLOWED]
    lines = [f"{name}: {'/'.join(what)} differ\n    {a.text()}\n    {b.text()}" for name, a, b, what in found]
    assert not found, (f"{len(found)} field(s) declared differently in two config models (nest one config in "
                       "both instead of copying it, or add the pair to ALLOWED with the reason):\n" + "\n".join(lines))


def test_every_allowed_pair_still_differs():
    """An allow-list entry whose pair now agrees (or is gone) is stale: remove it."""
    live = {(name, a.model, b.model) for name, a, b, _ in drift()}
    assert sorted(set(ALLOWED) - live) == []
