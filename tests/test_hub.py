"""The event hub that feeds the live streams: it reads the database only while a stream listens."""

from __future__ import annotations

import asyncio

from app.db import init_db, session_scope
from app.models import Event, EventType
from app.services.events import record_event
from app.services.hub import EventHub
from app.settings import Settings


class CountingHub(EventHub):
    """The real hub, counting its database reads."""

    polls = 0

    def _read_new(self, after: int) -> list[Event]:
        self.polls += 1
        return super()._read_new(after)


def add_event(settings: Settings, step: int) -> int:
    with session_scope(settings) as session:
        event = record_event(session, run_id=None, type=EventType.log, data={"step": step})
        session.flush()
        return event.id


def test_the_hub_polls_only_while_a_stream_listens_and_catches_up_when_one_opens(tmp_path):
    settings = Settings(home=tmp_path, event_poll_sec=0.01)
    init_db(settings)

    async def scenario() -> None:
        hub = CountingHub(settings)
        hub.start()
        add_event(settings, 0)
        first = add_event(settings, 1)
        await asyncio.sleep(0.2)  # 20 poll intervals with nobody listening
        assert hub.polls == 0 and hub.latest == 0 and not hub.recent

        async with hub.listening():
            await hub.wait_past(0, timeout=5)
            assert hub.latest == first  # the first poll after a pause reads only the newest event
            second = add_event(settings, 2)
            await hub.wait_past(first, timeout=5)
            assert hub.latest == second
            assert [e.data for e in hub.events_after(first, lambda e: True)] == [{"step": 2}]
            assert hub.events_after(first - 2, lambda e: True) is None  # older than memory: read the database
            assert hub.polls >= 2

        await asyncio.sleep(0.1)  # the poller notices that nobody listens
        paused_at = hub.polls
        add_event(settings, 3)
        await asyncio.sleep(0.2)
        assert hub.polls == paused_at
        assert hub.latest == 0 and not hub.recent  # stale memory dropped: streams read the database

        async with hub.listening():  # two streams, then one leaves: the other still gets new events
            async with hub.listening():
                await hub.wait_past(0, timeout=5)
                assert hub.latest == first + 2
            fourth = add_event(settings, 4)
            await hub.wait_past(first + 2, timeout=5)
            assert hub.latest == fourth
        await hub.stop()

    asyncio.run(scenario())
