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

    def _key(self) -> tuple:
        """The release without trailing zero components, so ``1.4.0`` keys like ``1.4``."""
        release = self.release
        while len(release) > 1 and release[-1] == "0":
            release = release[:-1]
        return release

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
        return self._key() == other._key()

    def __lt__(self, other: object) -> bool:
        other = self._coerce(other)
        if other is None:
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def major(self) -> int:
        return int(self.release[0])
