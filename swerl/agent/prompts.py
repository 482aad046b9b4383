"""Prompt templates: Jinja files shipped in resources/prompts, overridable by a folder of the same names."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

import jinja2

TEMPLATE_NAMES = ("system", "instance", "observation", "format_error", "prompt_line")


class PromptError(ValueError):
    """A prompt template is missing or does not render."""


class Prompts:
    """The agent's templates; ``directory`` overrides any of the shipped ``<name>.j2`` files."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory
        if directory is not None and not directory.is_dir():
            raise PromptError(f"prompt folder {directory} does not exist")
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)
        self._templates = {name: env.from_string(self._source(name)) for name in TEMPLATE_NAMES}

    def _source(self, name: str) -> str:
        if self.directory is not None and (self.directory / f"{name}.j2").is_file():
            return (self.directory / f"{name}.j2").read_text()
        return _shipped(name)

    def render(self, name: str, **values: object) -> str:
        try:
            return self._templates[name].render(**values).rstrip("\n")
        except jinja2.UndefinedError as e:
            raise PromptError(f"template {name}.j2: {e}; values given: {sorted(values)}") from e


@lru_cache(maxsize=None)
def _shipped(name: str) -> str:
    return resources.files("swerl.agent").joinpath(f"resources/prompts/{name}.j2").read_text()
