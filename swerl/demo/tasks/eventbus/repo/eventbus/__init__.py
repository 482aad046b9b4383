"""eventbus: a small in-process publish/subscribe event bus."""

from eventbus.bus import EventBus
from eventbus.events import Event, HandlerError
from eventbus.subscription import Subscription

__all__ = ["Event", "EventBus", "HandlerError", "Subscription"]
