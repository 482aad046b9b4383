"""A `swerl up` stack of a test's own (free ports, a temporary home), torn down however the test ends."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def own_stack(home: Path, **settings) -> Iterator:
    """``swerl up`` with ``settings`` (ServicesConfig fields) on free ports; ``swerl down`` after."""
    from swerl.services import ServicesConfig, down, up

    config = ServicesConfig(home=home, prefect_port=free_port(), mlflow_port=free_port(), startup_timeout_s=180, **settings)
    try:
        up(config)
        yield config
    finally:
        down(config)
