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


@contextmanager
def prefect_api_of(url: str) -> Iterator[str]:
    """The Prefect client settings pointed at ``url`` for the block.

    Prefect keeps one run-log worker and one event worker per process, keyed without the API URL, and
    each reads the URL once, when it starts. So they are drained on entering the block (a worker started
    for another server would otherwise send this block's events there: the server writes task runs from
    events, so they would be missing here) and again on leaving it, while ``url`` still answers (else they
    keep it queued for a server that is gone, and the session's last drain waits on it forever)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    APILogWorker.drain_all(timeout=30)
    EventsWorker.drain_all(timeout=30)
    with temporary_settings({PREFECT_API_URL: url}):
        try:
            yield url
        finally:
            APILogWorker.drain_all(timeout=30)
            EventsWorker.drain_all(timeout=30)


def query(config, database: str, sql: str, args: tuple = ()) -> list[tuple]:
    """Rows of ``sql`` in ``database`` of a ``swerl up --postgres`` stack (``config``: its ServicesConfig)."""
    from swerl.services import postgres

    conn = postgres.connect(config, database)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        conn.close()


def refused(url: str) -> bool:
    """Whether nothing listens at ``url`` any more (an OpenAI-compatible server's base URL)."""
    import httpx

    try:
        httpx.get(url + "/models", timeout=5)
    except httpx.ConnectError:
        return True
    return False
