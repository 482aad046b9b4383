"""Helpers for configs declared once: a form's model (``SamplerParams``)
extends a stage's (``SamplerConfig``) with what only the flow uses, and the stage takes the shared part (``part``);
a run's fingerprint names only the settings a user changed (``changed``)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def part(model: BaseModel, cls: type[M]) -> M:
    """The ``cls`` part of ``model`` (an instance of ``cls`` or of a subclass): the values of ``cls``'s fields, as set."""
    if not isinstance(model, cls):
        raise TypeError(f"{type(model).__name__} is not a {cls.__name__}")
    return cls.model_construct(_fields_set=model.model_fields_set & set(cls.model_fields),
                               **{name: getattr(model, name) for name in cls.model_fields})


def changed(settings: BaseModel) -> dict[str, Any]:
    """The settings set apart from their defaults (JSON values). A resume fingerprint or MLflow params that include
    these cover every new defaulted option at once, and stay what they were for a run written before it existed."""
    return settings.model_dump(mode="json", exclude_defaults=True)
