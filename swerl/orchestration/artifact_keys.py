"""Keys of the Prefect artifacts a flow publishes: Prefect takes lowercase letters, digits and dashes only, while
pipeline names and model labels may hold capitals, dots and underscores (a key with them fails the flow)."""

from __future__ import annotations

import re

MAX_KEY = 60


def artifact_key(kind: str, name: str) -> str:
    """``kind-name`` in Prefect's key alphabet: lowercase, every run of other characters one dash, at most 60."""
    key = re.sub(r"[^a-z0-9]+", "-", f"{kind}-{name}".lower()).strip("-")
    return key[:MAX_KEY].rstrip("-")
