"""URL slugs."""

from __future__ import annotations

import re

_NOT_ALLOWED = re.compile(r"[^a-z0-9]+")


def slugify(text: str, sep: str = "-", max_length: int | None = None) -> str:
    """Turn ``text`` into a URL-safe slug.

    The result contains only lowercase ASCII letters, digits and ``sep``;
    runs of anything else become a single separator, and separators at the
    ends are removed. With ``max_length`` the slug is cut at a word boundary
    when possible.

    >>> slugify("Hello, World!")
    'hello-world'
    """
    slug = _NOT_ALLOWED.sub(sep, text.lower()).strip(sep)
    if max_length is not None and len(slug) > max_length:
        cut = slug[: max_length + 1]
        if sep in cut:
            cut = cut[: cut.rindex(sep)]
        slug = cut[:max_length].strip(sep)
    return slug
