import pytest

from eventbus import Event, EventBus, HandlerError


def test_emit_calls_subscribed_handler():
    bus = EventBus("shop")
    seen = []
    bus.subscribe("cart.updated", seen.append)
    bus.emit("cart.updated", {"items": 2})
    assert seen == [Event("cart.updated", {"items": 2}, source="shop")]


def test_emit_returns_results_in_subscription_order():
    bus = EventBus()
    bus.subscribe("price.quote", lambda e: e.payload * 2)
    bus.subscribe("price.quote", lambda e: e.payload + 1)
    assert bus.emit("price.quote", 10) == [20, 11]


def test_emit_without_handlers_returns_empty_list():
    assert EventBus().emit("nobody.listens") == []


def test_handler_failure_is_wrapped():
    bus = EventBus()

    def broken(event):
        raise KeyError("boom")

    bus.subscribe("job.failed", broken)
    with pytest.raises(HandlerError, match="broken") as info:
        bus.emit("job.failed")
    assert isinstance(info.value.__cause__, KeyError)


def test_handlers_given_at_construction_are_called():
    calls = []
    bus = EventBus("audit", handlers={"user.deleted": [calls.append]})
    bus.emit("user.deleted", "alice")
    assert [e.payload for e in calls] == ["alice"]


def test_subscribe_rejects_non_callables():
    with pytest.raises(TypeError):
        EventBus().subscribe("x", "not a function")
