"""Release versions."""

from __future__ import annotations

import functools
import re

from vercmp.errors import InvalidVersion

_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)$")


@functools.total_ordering
class Version:
    """A release version like ``2.10.3``; a leading ``v`` is accepted.

    Versions compare component by component, and missing trailing components
    count as zero, so ``Version("1.4") == Version("1.4.0")``.
    """

    def __init__(self, text: str) -> None:
        match = _VERSION.match(text.strip())
        if match is None:
            raise InvalidVersion(f"invalid version: {text!r}")
        self.text = match.group(1)
        self.release = tuple(match.group(1).split("."))

    def __repr__(self) -> str:
        return f"Version('{self.text}')"

    def __str__(self) -> str:
        return self.text

    def _key(self, length: int) -> tuple:
        """The release padded with zeros to ``length`` components."""
        return self.release + ("0",) * (length - len(self.release))

    def _coerce(self, other: object) -> Version | None:
        if isinstance(other, Version):
            return other
        if isinstance(other, str):
            return Version(other)
        return None

    def __eq__(self, other: object) -> bool:
        other = self._coerce(other)
        if other is None:
            return NotImplemented
        length = max(len(self.release), len(other.release))
        return self._key(length) == other._key(length)

    def __lt__(self, other: object) -> bool:
        other = self._coerce(other)
        if other is None:
            return NotImplemented
        length = max(len(self.release), len(other.release))
        return self._key(length) < other._key(length)

    def __hash__(self) -> int:
        return hash(self._key(3) if len(self.release) <= 3 else self.release)

    @property
    def major(self) -> int:
        return int(self.release[0])
