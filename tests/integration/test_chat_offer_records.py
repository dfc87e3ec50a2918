"""What the store shows of a chat offer (R26): an offer run as an activity is recorded as attempting while it
runs, then with its result; the first attempt in the coordinator's task (a local activity, bounded at a second)
writes only its result, one store write less for each event. Against the reference chat over HTTP and a real
SQLite store."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.chat import ChatActivities
from clients.chat_client import ChatClient
from domain.activity_io import OfferEvent
from domain.book import EventState
from reference_chat.server import running_chat
from store.helper_store import HelperStore


@pytest.mark.parametrize(("is_local", "written"), [(False, ["attempting", "delivered"]), (True, ["delivered"])])
async def test_an_offer_records_its_states(tmp_path: Path, is_local: bool, written: list[str]) -> None:
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
            environment.info = dataclasses.replace(environment.info, is_local=is_local)
            offer = OfferEvent(owner="vic", key="vic-e1", helper_ids=["h1"], language="en", attempts=0)
            try:
                result = await environment.run(ChatActivities(store, chat).offer_chat_event, offer)
            finally:
                await chat.aclose()
        assert result.state is EventState.DELIVERED and result.receipt_id
        assert states == written
        [event] = await store.events("vic")
        assert (event.state, event.attempts, event.receipt_id) == ("delivered", 1, result.receipt_id)
    finally:
        await store.close()
