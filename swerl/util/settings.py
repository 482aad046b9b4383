"""Settings that several components share, declared once.

A component that takes one of these settings inherits its model here instead of declaring the field again, so
its type, bounds, default and description have one home (``tests/unit/test_config_consistency.py`` fails on a
second declaration).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class SeedSettings(BaseModel):
    """A component's base seed; everything random it does derives from it (numpy and torch take 32 bits)."""

    seed: int = Field(0, ge=0, le=2**32 - 1, description="Base seed: the same seed gives the same result.")
