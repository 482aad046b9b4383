"""The event bus itself."""

from __future__ import annotations

from typing import Any, Callable

from eventbus.events import Event, HandlerError
from eventbus.subscription import Subscription

Handler = Callable[[Event], Any]


class EventBus:
    """Deliver events to the handlers subscribed to their name.

    ``handlers`` optionally maps event names to handlers that are subscribed
    from the start.
    """

    def __init__(self, name: str = "default", handlers: dict[str, list[Handler]] = {}) -> None:
        self.name = name
        self._handlers = handlers

    def subscribe(self, event_name: str, handler: Handler) -> Subscription:
        """Call ``handler(event)`` for every event named ``event_name``."""
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        self._handlers.setdefault(event_name, []).append(handler)
        return Subscription(self, event_name, handler)

    def unsubscribe(self, event_name: str, handler: Handler) -> None:
        """Remove ``handler``; unknown handlers are ignored."""
        handlers = self._handlers.get(event_name, [])
        if handler in handlers:
            handlers.remove(handler)

    def handlers_for(self, event_name: str) -> list[Handler]:
        """A copy of the handlers subscribed to ``event_name``, in order."""
        return list(self._handlers.get(event_name, []))

    def emit(self, event_name: str, payload: Any = None, **fields: Any) -> list[Any]:
        """Deliver an event and return the handlers' results, in order."""
        event = Event(event_name, payload, source=self.name, **fields)
        results = []
        for handler in self.handlers_for(event_name):
            try:
                results.append(handler(event))
            except Exception as exc:
                raise HandlerError(event, handler) from exc
        return results
