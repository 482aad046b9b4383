"""Find sandbox configs of one kind anywhere in a run's parameters: what a reap of that run must cover."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

C = TypeVar("C", bound=BaseModel)


def configs_in(value: Any, model: type[C]) -> list[C]:
    """Every distinct ``model`` config anywhere in ``value``: config models, or flow parameters as models, dicts
    and lists (a dict whose ``kind`` is the model's is read as one; one that does not validate is passed over)."""
    kind = model.model_fields["kind"].default
    found: list[C] = []

    def walk(v: Any) -> None:
        if isinstance(v, model):
            if v not in found:
                found.append(v)
            return
        if isinstance(v, BaseModel):
            v = {name: getattr(v, name, None) for name in type(v).model_fields}
        if isinstance(v, dict):
            if v.get("kind") == kind:
                try:
                    walk(model.model_validate(v))
                except ValidationError:
                    pass
                return
            for item in v.values():
                walk(item)
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)

    walk(value)
    return found
