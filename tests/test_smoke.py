from core.events import EventKind, InboundEvent


async def test_plain_message_gets_a_reply(engine, fake):
    scope = await engine.agent("local", "alice")
    exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "hello there"))
    assert exchange.replies == ["You said: hello there"]
    assert len(fake.chat_requests) == 1
