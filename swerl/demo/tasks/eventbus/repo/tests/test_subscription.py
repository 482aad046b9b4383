from eventbus import EventBus


def test_cancel_stops_delivery():
    bus = EventBus()
    seen = []
    sub = bus.subscribe("mail.sent", seen.append)
    bus.emit("mail.sent", 1)
    sub.cancel()
    bus.emit("mail.sent", 2)
    assert [e.payload for e in seen] == [1]
    assert not sub.active


def test_cancel_twice_is_harmless():
    bus = EventBus()
    sub = bus.subscribe("mail.bounced", print)
    sub.cancel()
    sub.cancel()
    assert bus.handlers_for("mail.bounced") == []


def test_subscription_as_context_manager():
    bus = EventBus()
    seen = []
    with bus.subscribe("sms.sent", seen.append):
        bus.emit("sms.sent", "hello")
    bus.emit("sms.sent", "ignored")
    assert [e.payload for e in seen] == ["hello"]
