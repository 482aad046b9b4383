"""Work that runs beside the flow's own: a thread that carries the caller's context (Prefect's flow run, so a
subflow or task it calls is the flow's child, shown in the same run), its outcome a Future."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def in_background(fn: Callable[[], T], name: str) -> Future[T]:
    """Start ``fn`` in a thread named ``name`` with a copy of this context; its result (or exception) is the Future's."""
    future: Future[T] = Future()
    context = contextvars.copy_context()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(context.run(fn))
        except BaseException as e:  # the caller sees it when it takes the result
            future.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
