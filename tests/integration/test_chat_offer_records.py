"""What the store shows of a chat offer (R26): an offer is recorded as attempting while it runs, then with its
result. Against the reference chat over HTTP and a real SQLite store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.chat import ChatActivities
from clients.chat_client import ChatClient
from domain.book import EventState
from domain.messages.activities import OfferEvent
from reference.chat.server import running_chat
from store.helper_store import HelperStore
from tests.helpers import chat_events


async def test_an_offer_records_its_states(tmp_path: Path) -> None:
    store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
    states: list[str] = []
    record_event = store.record_event

    async def recording(**values: Any) -> None:
        states.append(values["state"])
        await record_event(**values)

    store.record_event = recording  # type: ignore[method-assign]
    try:
        async with running_chat() as chat_url:
            chat = ChatClient(chat_url, timeout_ms=5_000)
            environment = ActivityEnvironment()
            offer = OfferEvent(owner="vic", key="vic-e1", helper_ids=["h1"], language="en", attempts=0)
            try:
                result = await environment.run(ChatActivities(store, chat).offer_chat_event, offer)
            finally:
                await chat.aclose()
        assert result.state is EventState.DELIVERED and result.receipt_id
        assert states == ["attempting", "delivered"]
        [event] = await chat_events(store, "vic")
        assert (event.state, event.attempts, event.receipt_id) == ("delivered", 1, result.receipt_id)
    finally:
        await store.close()
