"""Wakes event streams when new events land in the database.

One poller per app process reads the newest event id every ``event_poll_sec`` and
wakes the waiting streams; each stream then reads its own events from the database.
So a stream shows what the database holds (the whole history after a restart), and
100 clients cost one cheap query per poll plus one per client per new event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from anyio import to_thread
from sqlmodel import Session

from ..db import get_engine
from ..settings import Settings
from .events import latest_event_id

log = logging.getLogger(__name__)


class EventHub:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.latest = 0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task | None = None

    def _read_latest(self) -> int:
        with Session(get_engine(self.settings)) as s:
            return latest_event_id(s)

    async def _poll(self) -> None:
        while True:
            try:
                latest = await to_thread.run_sync(self._read_latest)
            except Exception:
                log.exception("event poll failed; retrying")
                latest = self.latest
            if latest != self.latest:
                self.latest = latest
                async with self._changed:
                    self._changed.notify_all()
            await asyncio.sleep(self.settings.event_poll_sec)

    async def wait_past(self, seen: int, timeout: float) -> None:
        """Return once the newest event id differs from ``seen``, or after ``timeout`` seconds."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(lambda: self.latest != seen), timeout)

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
