"""The event object handed to handlers, and the error raised when one fails."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Event:
    """Something that happened: a dotted ``name`` and an arbitrary ``payload``."""

    name: str
    payload: Any = None
    source: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


class HandlerError(RuntimeError):
    """A handler raised while processing ``event``; the original is ``__cause__``."""

    def __init__(self, event: Event, handler: Any) -> None:
        name = getattr(handler, "__qualname__", repr(handler))
        super().__init__(f"handler {name} failed on event {event.name!r}")
        self.event = event
        self.handler = handler
