"""Converting identifiers between naming conventions."""

from __future__ import annotations

import re

# Split "parseHTTPResponse" into parse / HTTP / Response, and digits apart.
_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def words(identifier: str) -> list[str]:
    """The words of an identifier in any common convention."""
    return _WORDS.findall(identifier)


def snake_case(identifier: str) -> str:
    """``parseHTTPResponse`` -> ``parse_http_response``."""
    return "_".join(word.lower() for word in words(identifier))


def kebab_case(identifier: str) -> str:
    """``parseHTTPResponse`` -> ``parse-http-response``."""
    return "-".join(word.lower() for word in words(identifier))


def camel_case(identifier: str) -> str:
    """``user_id`` -> ``userId``."""
    parts = [word.lower() for word in words(identifier)]
    if not parts:
        return ""
    return parts[0] + "".join(part.capitalize() for part in parts[1:])
