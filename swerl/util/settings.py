"""Settings that several components share, declared once.

A component that takes one of these settings inherits its model here instead of declaring the field again, so
its type, bounds, default and description have one home (``tests/unit/test_config_consistency.py`` fails on a
second declaration).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SeedSettings(BaseModel):
    """A component's base seed; everything random it does derives from it (numpy and torch take 32 bits)."""

    seed: int = Field(0, ge=0, le=2**32 - 1, description="Base seed: the same seed gives the same result.")


class HostSettings(BaseModel):
    """The interface a server listens on (and its clients connect to)."""

    host: str = Field("127.0.0.1", min_length=1, max_length=253, description="Address the server listens on and its "
                      "clients connect to; a private-network address when other machines must reach it, never a public "
                      "one (swerl's servers have no authentication).")


class DeviceSettings(BaseModel):
    """Where a component runs its torch model."""

    device: str = Field("auto", pattern=r"^(auto|cpu|mps|cuda(:\d+)?)$",
                        description="'cpu', 'mps', 'cuda', 'cuda:N', or 'auto' (the first GPU if any, else CPU).")


class DtypeSettings(BaseModel):
    """The dtype a component computes in; what 'auto' chooses is the component's own (its description says)."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights and activations. 'auto': float32 on a CPU; on a GPU bfloat16 (vLLM: the checkpoint's "
        "dtype, bfloat16 for a float32 one); the component's description says why.")
