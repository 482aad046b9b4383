"""The configuration reference, generated from the pydantic models themselves so it cannot drift: every model a
Prefect form (and so the CLI and the YAML) reaches, each field with its type, default, bounds and description.

``docs/hooks/swerl_docs.py`` renders it into the documentation site at build time.
"""

from __future__ import annotations

import enum
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))


def form_models() -> dict[str, type[BaseModel]]:
    """The flows' parameter models, by the flow that takes them: where every setting a user gives starts."""
    from swerl.orchestration.params import BuildImagesParams, EvaluateParams, GradeParams, PipelineParams, RolloutParams

    return {"pipeline": PipelineParams, "evaluate": EvaluateParams, "rollout": RolloutParams,
            "build-images": BuildImagesParams, "grade": GradeParams}


def models_in(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation names, inside Optional, list, dict, unions and Annotated too."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in models_in(arg)]


def reachable(roots: list[type[BaseModel]]) -> list[type[BaseModel]]:
    """``roots`` and every model nested in their fields, each once, in the order first met (depth first)."""
    seen: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.append(model)
        for info in model.model_fields.values():
            for nested in models_in(info.annotation):
                visit(nested)

    for root in roots:
        visit(root)
    return seen


def type_text(annotation: object) -> str:
    """A field's type as a reader writes it, nested models linked to their section."""
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_text(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_text(a) for a in args)}]"
    if annotation is Path:
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.default_factory()
        return f"a {type(value).__name__}" if isinstance(value, BaseModel) else f"`{value!r}`"
    value = info.default
    if value is PydanticUndefined:
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    return f"`{str(value) if isinstance(value, Path) else repr(value)}`"


def bounds_text(info: FieldInfo) -> str:
    parts = []
    for meta in info.metadata:
        for key, sign in BOUNDS:
            bound = getattr(meta, key, None)
            if bound is not None:
                parts.append(f"{sign} {bound}")
        for key in ("min_length", "max_length", "pattern"):
            value = getattr(meta, key, None)
            if value is not None:
                parts.append(f"{key} `{value}`")
    return ", ".join(parts)


def _cell(text: str) -> str:
    # a table cell is one line; a pipe would end it, angle brackets would be read as HTML
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def model_section(model: type[BaseModel]) -> str:
    """One model's heading, its docstring's first paragraph and a table of its fields."""
    doc = (model.__doc__ or "").strip().split("\n\n")[0]
    rows = ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        rows.append(f"| `{name}` | {type_text(info.annotation)} | {_cell(default_text(info))} | {_cell(bounds_text(info))} "
                    f"| {_cell(info.description or '')} |")
    return f"### {model.__name__}\n\n{_cell(doc)}\n\n" + "\n".join(rows) + "\n"


def configuration_reference() -> str:
    """Every model the flows' forms reach: the forms first, then what they nest."""
    forms = form_models()
    intro = ["Each flow's parameters (its Prefect form, its YAML in `deployments/`), and every model they nest. "
             "The CLI's options are built from the same fields.", "", "| flow | parameters |", "|---|---|"]
    intro += [f"| `{flow}` | [{model.__name__}](#{model.__name__.lower()}) |" for flow, model in forms.items()]
    return "\n".join(intro) + "\n\n" + "\n".join(model_section(m) for m in reachable(list(forms.values())))
