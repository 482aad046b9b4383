"""CLI options declared by config fields. A flag takes its help, bounds and default from the one pydantic
field it sets, so `swerl rollout` and `swerl train` cannot drift from the stages and the Prefect forms."""

from __future__ import annotations

from typing import Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError

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
    from swerl.cli import _fail

    try:
        return cls(**values)
    except ValidationError as e:
        errors = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or cls.__name__}: {err['msg']}" for err in e.errors())
        _fail(f"invalid {what} settings: {errors}")
        raise  # unreachable: _fail exits
