"""One helper for configs declared once and shared by inheritance: a form's model (``SamplerParams``)
extends a stage's (``SamplerConfig``) with what only the flow uses; the stage takes the shared part."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def part(model: BaseModel, cls: type[M]) -> M:
    """The ``cls`` part of ``model`` (an instance of ``cls`` or of a subclass): the values of ``cls``'s fields, as set."""
    if not isinstance(model, cls):
        raise TypeError(f"{type(model).__name__} is not a {cls.__name__}")
    return cls.model_construct(_fields_set=model.model_fields_set & set(cls.model_fields),
                               **{name: getattr(model, name) for name in cls.model_fields})
