"""Version specifiers such as ``>=1.2, <2.0``."""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable
from typing import Callable, Union

from vercmp.errors import InvalidSpecifier
from vercmp.version import Version

_OPERATORS: dict[str, Callable[[Version, Version], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
_SPEC = re.compile(r"^\s*(==|!=|<=|>=|<|>)\s*(\S+)\s*$")
VersionLike = Union[Version, str]


class Specifier:
    """One comparison, e.g. ``>=1.2``."""

    def __init__(self, text: str) -> None:
        match = _SPEC.match(text)
        if match is None:
            raise InvalidSpecifier(f"invalid specifier: {text!r}")
        self.operator, version = match.groups()
        self.version = Version(version)

    def __repr__(self) -> str:
        return f"Specifier('{self.operator}{self.version}')"

    def contains(self, version: VersionLike) -> bool:
        candidate = version if isinstance(version, Version) else Version(version)
        return _OPERATORS[self.operator](candidate, self.version)


class SpecifierSet:
    """Comma-separated specifiers that must all match; empty matches everything."""

    def __init__(self, text: str = "") -> None:
        self.specifiers = [Specifier(part) for part in text.split(",") if part.strip()]

    def contains(self, version: VersionLike) -> bool:
        return all(spec.contains(version) for spec in self.specifiers)

    def filter(self, versions: Iterable[VersionLike]) -> list[VersionLike]:
        """The versions that match, in their original order."""
        return [v for v in versions if self.contains(v)]
