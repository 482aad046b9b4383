"""Handles returned by :meth:`EventBus.subscribe`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from eventbus.bus import EventBus


class Subscription:
    """One handler subscribed to one event name; ``cancel()`` unsubscribes it."""

    def __init__(self, bus: EventBus, event_name: str, handler: Callable[..., Any]) -> None:
        self.bus = bus
        self.event_name = event_name
        self.handler = handler
        self.active = True

    def cancel(self) -> None:
        """Stop delivering events to the handler. Cancelling twice is harmless."""
        if self.active:
            self.bus.unsubscribe(self.event_name, self.handler)
            self.active = False

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cancel()
