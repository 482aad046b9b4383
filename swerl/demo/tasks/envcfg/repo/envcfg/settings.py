"""The Settings object: typed getters over a mapping of variables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, TypeVar

from envcfg import converters
from envcfg.errors import MissingSetting

T = TypeVar("T")
_MISSING: Any = object()


class Settings:
    """Read variables from ``environ`` (usually ``os.environ``).

    Names passed to the getters are looked up with ``prefix`` prepended, so
    ``Settings(os.environ, prefix="APP_").get("PORT")`` reads ``APP_PORT``.
    All getters raise :class:`~envcfg.ConfigError` when a variable is missing
    and no default is given, or when its value cannot be converted.
    """

    def __init__(self, environ: Mapping[str, str], prefix: str = "") -> None:
        self.environ = environ
        self.prefix = prefix

    def full_name(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def _read(self, name: str, convert: Callable[[str], T], default: Any) -> T:
        key = self.full_name(name)
        if key not in self.environ:
            if default is _MISSING:
                raise MissingSetting(key)
            return default
        return convert(self.environ[key])

    def get(self, name: str, default: Any = _MISSING) -> str:
        """The raw text of a variable."""
        return self._read(name, str, default)

    def get_int(self, name: str, default: Any = _MISSING) -> int:
        """A variable parsed as a base-10 integer."""
        return self._read(name, converters.to_int, default)

    def get_bool(self, name: str, default: Any = _MISSING) -> bool:
        """A variable parsed as a boolean word (``1``, ``yes``, ``off``, ...)."""
        return self._read(name, converters.to_bool, default)

    def get_list(self, name: str, default: Any = _MISSING, separator: str = ",") -> list[str]:
        """A variable split into a list of non-empty, stripped items."""
        return self._read(name, lambda text: converters.to_list(text, separator), default)
