"""Where a flow's chunks run: in the flow's own process (Prefect's default task runner), or on the
workers of an existing Dask cluster through Prefect's Dask task runner (``prefect-dask``) when a
scheduler address is given. Either way each chunk is a Prefect task run, with its retries, logs
and state in the Prefect UI; a Dask worker needs the repository importable (run it from the
repository root) and the Prefect API reachable at the flow's own ``PREFECT_API_URL``."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

DASK_ADDRESS = r"^(tcp|tls|ucx|ws|wss)://[^\s/]+:\d{1,5}$"


class FanOutParams(BaseModel):
    """How a flow splits its items into chunks, and where the chunks run."""

    chunk_size: int | None = Field(None, ge=1, le=100_000, description="Items (tasks, predictions) per task run; None: one "
                                   "run for all. The chunks run in parallel on a distributed task runner (`dask_address`).")
    dask_address: str | None = Field(
        None, pattern=DASK_ADDRESS, description="Scheduler of a Dask cluster whose workers run the chunks, e.g. "
        "tcp://10.0.0.5:8786 (prefect-dask's task runner); None: every chunk runs in the flow's own process.")


def run_tasks(task: Any, calls: Sequence[dict[str, Any]], *, dask_address: str | None = None) -> list[Any]:
    """Submit ``task`` once per parameter dict in ``calls`` and return their results in order; on the Dask
    cluster at ``dask_address`` when given. Call from inside a flow run."""
    if dask_address is None:
        futures = [task.submit(**kw) for kw in calls]
        return [f.result() for f in futures]
    from prefect_dask import DaskTaskRunner

    with DaskTaskRunner(address=dask_address) as runner:
        futures = [runner.submit(task, parameters=dict(kw)) for kw in calls]
        return [f.result() for f in futures]


def where_am_i() -> str:
    """The Dask worker running this code (its name), or this host and process when it is no worker's."""
    try:
        from distributed import get_worker

        return f"dask:{get_worker().name}"
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


__all__ = ["FanOutParams", "run_tasks", "where_am_i"]
