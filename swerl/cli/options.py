"""CLI options declared by config fields. A flag takes its help, bounds and default from the one pydantic
field it sets, so `swerl rollout` and `swerl train` cannot drift from the stages and the Prefect forms:
``field_option`` declares one such flag, ``config_options`` every field of a component's model at once
(a new field is an option without an edit here or in the command)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Optional, TypeVar, Union, get_args, get_origin

import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

M = TypeVar("M", bound=BaseModel)
_FIELD = object()


def field_option(model: type[BaseModel], name: str, *flags: str, default: Any = _FIELD, **kw: Any) -> Any:
    """A typer option for ``model.name``: its description as help, its ge/le as min/max, its default (or ``default``,
    a stage's preset)."""
    field = model.model_fields[name]
    bounds = {}
    for meta in field.metadata:
        if getattr(meta, "ge", None) is not None:
            bounds["min"] = meta.ge
        if getattr(meta, "le", None) is not None:
            bounds["max"] = meta.le
    value = field.get_default(call_default_factory=True) if default is _FIELD else default
    return typer.Option(value, *flags, help=kw.pop("help", field.description), **bounds, **kw)


def validated(cls: type[M], what: str, **values: Any) -> M:
    """``cls(**values)``, or exit 2 naming each refused setting and why (cross-field rules included)."""
    from swerl.cli.common import fail

    try:
        return cls(**values)
    except ValidationError as e:
        errors = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or cls.__name__}: {err['msg']}" for err in e.errors())
        fail(f"invalid {what} settings: {errors}")
        raise  # unreachable: fail exits


# ---------------------------------------------------------------------------- a model's fields as options

_SCALARS = (bool, int, float, str, Path)


@dataclass(frozen=True)
class OptionGroup:
    """One component config's fields as options of a command, handed to it as one dict named ``name``.

    A field appears as ``--<prefix><field-name>`` (``--x/--no-x`` for a switch; ``rename`` gives a field
    another flag name) with its description as help and its bounds and default shown; a value left out is
    not passed, so the model's default (and ``model_fields_set``) hold, and the model itself checks every
    bound, its error naming the field. A field one flag cannot carry (a nested model, a dict) is left to its
    own group. ``model`` may be a tagged union of models (``EngineSettings``): its options are every member's
    fields (one each: a field several members share is declared once, in their common base), the tag's
    option takes any member's tag, and each member's own fields say which members take them."""

    name: str
    model: Any  # a pydantic model, or a union of them tagged by a Literal field (a discriminated union)
    panel: str
    prefix: str = ""
    skip: tuple[str, ...] = ()
    short: Mapping[str, str] = dataclass_field(default_factory=dict)
    preset: Callable[[], BaseModel] | None = None  # the caller's defaults when not the model's own
    rename: Mapping[str, str] = dataclass_field(default_factory=dict)  # field -> its flag's name, when not the field's

    def members(self) -> list[type[BaseModel]]:
        """The models the group's options fill: the model, or each member of the union, in order."""
        if isinstance(self.model, type) and issubclass(self.model, BaseModel):
            return [self.model]
        return _union_members(self.model)

    def label(self) -> str:
        """The model's name in messages (a union's: its members', joined by |)."""
        return " | ".join(m.__name__ for m in self.members())

    def infos(self) -> dict[str, FieldInfo]:
        """Every field of the group's model (of a union: of any member; its tag's values are the members')."""
        members = self.members()
        if len(members) == 1:
            return dict(members[0].model_fields)
        tag = _tag(self.model)
        kinds = tuple(m.model_fields[tag].default for m in members)
        out: dict[str, FieldInfo] = {tag: FieldInfo(
            annotation=Literal[kinds], default=kinds[0],
            description=f"Which one: {', '.join(map(str, kinds))}; an option below that names others is refused with it.")}
        for member in members:
            for name, info in member.model_fields.items():
                out.setdefault(name, info)
        return out

    def takers(self, name: str) -> list[str]:
        """The tags of the union's members that have field ``name`` (empty for a plain model, or a field all have)."""
        members = self.members()
        if len(members) == 1:
            return []
        tag = _tag(self.model)
        have = [str(m.model_fields[tag].default) for m in members if name in m.model_fields]
        return [] if len(have) == len(members) else have

    def defaults(self) -> dict[str, Any]:
        """What a field left out comes to: the preset's value, else the model's default (of a union: the first
        member's that has it)."""
        if self.preset is not None:
            return dict(self.preset())
        return {name: info.get_default(call_default_factory=True) for name, info in self.infos().items()}

    def fields(self) -> dict[str, Any]:
        """The fields one flag can carry, name -> option type; the others (nested models, dicts) are skipped."""
        return {name: kind for name, info in self.infos().items()
                if name not in self.skip and (kind := option_type(info.annotation)) is not None}

    def flag(self, name: str) -> str:
        return f"--{self.prefix}{self.rename.get(name, name).replace('_', '-')}"

    def flags(self, name: str, kind: Any) -> list[str]:
        """The field's flags: ``--x/--no-x`` for a switch, then its short flag, if any."""
        flag = self.flag(name)
        long = f"{flag}/--no-{flag[2:]}" if kind is bool else flag
        return [long, *([self.short[name]] if name in self.short else [])]


def option_type(annotation: Any) -> Any | None:
    """The type an option parses a field as: a scalar, a Literal of strings, or a list of scalars (a repeated
    flag); None for what one flag cannot carry (models, unions of models, dicts)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return option_type(args[0])
    if origin in (Union, UnionType):
        present = [a for a in args if a is not type(None)]
        return option_type(present[0]) if len(present) == 1 else None
    if origin is Literal:
        return annotation if all(isinstance(a, str) for a in args) else None
    if origin in (list, tuple):
        inner = option_type(args[0]) if args else None
        return list[inner] if inner in _SCALARS else None
    return annotation if annotation in _SCALARS else None


def _union_members(annotation: Any) -> list[type[BaseModel]]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _union_members(args[0])
    if origin in (Union, UnionType) and args and all(isinstance(a, type) and issubclass(a, BaseModel) for a in args):
        return list(args)
    raise TypeError(f"an option group's model is a pydantic model or a union of them, not {annotation!r}")


def _tag(annotation: Any) -> str:
    """The field that tells a union's members apart (its discriminator)."""
    for meta in get_args(annotation)[1:] if get_origin(annotation) is Annotated else ():
        if isinstance(getattr(meta, "discriminator", None), str):
            return meta.discriminator
    raise TypeError(f"{annotation!r} is no union tagged by a field (Field(discriminator=...))")


def _bounds(info: FieldInfo) -> str:
    said = [f"{op} {getattr(meta, key)}" for meta in info.metadata
            for key, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if getattr(meta, key, None) is not None]
    return f" [{', '.join(said)}]" if said else ""


def _group_parameters(group: OptionGroup) -> list[tuple[inspect.Parameter, str]]:
    """(the command's parameter, the field it sets) for every field of the group."""
    out, defaults = [], group.defaults()
    infos = group.infos()
    for name, kind in group.fields().items():
        info, default = infos[name], defaults[name]
        flags = group.flags(name, kind)
        takers = group.takers(name)
        only = f" (only {', '.join(takers)})" if takers else ""
        # None: left out, so the model's default stands; pydantic, not click, checks bounds (gt/lt included)
        option = typer.Option(None, *flags, help=f"{info.description or ''}{_bounds(info)}{only}", rich_help_panel=group.panel,
                              show_default=str(list(default) if isinstance(default, tuple) else default))
        out.append((inspect.Parameter(f"{group.name}__{name}", inspect.Parameter.KEYWORD_ONLY, default=option,
                                      annotation=Optional[kind]), name))
    return out


def config_options(*groups: OptionGroup) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command one option per field of each group's model, in place of its parameters named after the
    groups, which receive the values given (``{"max_turns": 4}``) to build the models with."""

    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(func, eval_str=True).parameters.values() if p.name not in {g.name for g in groups}]
        sets: dict[str, tuple[str, str]] = {}
        # the command's own flags too: a component field named like one of them must be skipped or prefixed
        flags = {flag: f"the command's {p.name}" for p in own for flag in getattr(p.default, "param_decls", ()) or ()}
        generated = []
        for group in groups:
            for param, name in _group_parameters(group):
                for flag in param.default.param_decls:
                    if flag in flags:
                        raise ValueError(f"{flag} would set both {flags[flag]} and {group.label()}.{name}")
                    flags[flag] = f"{group.label()}.{name}"
                sets[param.name] = (group.name, name)
                generated.append(param)

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            given: dict[str, dict[str, Any]] = {g.name: {} for g in groups}
            for pname, (group_name, name) in sets.items():
                value = kwargs.pop(pname)
                if value is not None and value != []:
                    given[group_name][name] = value
            return func(**kwargs, **given)

        params = own + generated
        del command.__wrapped__  # typer must read the signature below, not func's
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return wrap
