"""Wake long-poll reads when a session's snapshot changes (R44).

Every snapshot write goes through `SessionStore.save`, which calls `notify`; a read waiting for a change
holds the session's event. One event per session with waiters, dropped once it fires: nothing grows with
sessions nobody watches.
"""

from __future__ import annotations

import asyncio


class SnapshotChanges:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def event_for(self, session_id: str) -> asyncio.Event:
        """The event the next change of `session_id` sets; take it before reading the snapshot, so no
        change between the read and the wait is missed."""
        event = self._events.get(session_id)
        if event is None:
            event = self._events[session_id] = asyncio.Event()
        return event

    def notify(self, session_id: str) -> None:
        event = self._events.pop(session_id, None)
        if event is not None:
            event.set()

    def notify_all(self) -> None:
        """Wake every waiter (the core is stopping): they answer with what they have."""
        for session_id in list(self._events):
            self.notify(session_id)
