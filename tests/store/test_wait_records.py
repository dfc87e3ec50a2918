"""The record of every wait for the owner (R56) in the store, on SQLite and PostgreSQL: written in the transaction of
the write that ends the wait, with exactly what the row showed and its digest; one record however often the write is
retried; another owner's never read; removed once past its keep."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from config.settings import Settings
from contracts.core_api import QuestionChoices, QuestionOption
from domain.audit import WaitEnd, WaitEndKind, WaitKind, shown_digest
from domain.messages.activities import FollowedUp
from domain.messages.updates import Decider, OwnerAnswer
from domain.outcome import OutcomeKind
from domain.rows import RowState
from protocol.errors import InvalidRequest
from starter.reads import StoreReader
from store.helper_store import HelperStore
from tests.store.test_helper_store import row, store  # noqa: F401  (the SQLite / PostgreSQL fixture)

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
VENUE = QuestionChoices(
    question_id="venue", options=[QuestionOption(id="walk", label="Walking"), QuestionOption(id="taxi", label="Taxi")]
)
SHOWN = "Question: Walk or taxi?\nWalking / Taxi"


def asked_row(helper_id: str, owner: str = "anna") -> object:
    return row(
        helper_id,
        owner=owner,
        state=RowState.DELIVERED,
        outcome_kind=OutcomeKind.QUESTION,
        summary=SHOWN,
        choices=VENUE,
        session_id=f"s-{helper_id}",
        finished_at=NOW - timedelta(hours=2),
        delivered_at=NOW - timedelta(hours=1),
    )


def end(helper_id: str, ended: WaitEndKind, at: datetime = NOW, **more: object) -> WaitEnd:
    return WaitEnd(
        helper_id=helper_id, seq=1, kind=WaitKind.QUESTION, question_id="venue", ended=ended, ended_at=at, **more
    )


async def test_an_answered_wait_is_recorded_with_the_admission_of_its_follow_up(store: HelperStore) -> None:  # noqa: F811
    await store.insert_admitted(asked_row("h1"))  # type: ignore[arg-type]
    answered = end(
        "h1",
        WaitEndKind.ANSWERED,
        answer=OwnerAnswer(question_id="venue", option_id="taxi"),
        decider=Decider(by="owner", via="telegram", through="api"),
        follow_up="h1.answer",
        reminders_sent=1,
    )
    earlier = FollowedUp(helper_id="h1", seq=1, generation=3, state=RowState.DELIVERED, ended=answered)
    follow_up = row("h1.answer", seq=2, follow_up_of="h1")
    assert await store.insert_admitted(follow_up, earlier)
    assert not await store.insert_admitted(follow_up, earlier)  # retried: still one record

    [record] = await store.reads.wait_records("anna")
    assert (record.ended, record.follow_up, record.reminders_sent) == (WaitEndKind.ANSWERED, "h1.answer", 1)
    assert record.answer == OwnerAnswer(question_id="venue", option_id="taxi")
    assert (record.decider.by, record.decider.via, record.decider.through) == ("owner", "telegram", "api")
    assert (record.shown_text, record.shown_choices, record.session_id) == (SHOWN, VENUE, "s-h1")
    assert (record.asked_at, record.delivered_at) == (NOW - timedelta(hours=2), NOW - timedelta(hours=1))
    # The digest is SHA-256 of exactly what was shown, as a reader can compute it again.
    canonical = json.dumps(
        {"text": SHOWN, "choices": VENUE.model_dump(mode="json")},
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
    )
    assert record.shown_sha256 == hashlib.sha256(canonical.encode()).hexdigest() == shown_digest(SHOWN, VENUE)


async def test_an_expired_or_closed_wait_is_recorded_with_its_row_write_or_removal(store: HelperStore) -> None:  # noqa: F811
    for helper_id in ("expired", "closed"):
        await store.insert_admitted(asked_row(helper_id))  # type: ignore[arg-type]
    expired = end("expired", WaitEndKind.EXPIRED, NOW - timedelta(minutes=1), reminders_sent=2)
    assert await store.write_state("anna", "expired", 1, 5, expired, state=RowState.EXPIRED)
    closed = end("closed", WaitEndKind.CLOSED)
    assert await store.remove_rows("anna", ["closed"], {"closed": 1}, [closed])
    assert await store.remove_rows("anna", ["closed"], {"closed": 1}, [closed]) == []  # retried after the removal

    records = await store.reads.wait_records("anna")
    assert [(r.helper_id, r.ended) for r in records] == [
        ("closed", WaitEndKind.CLOSED),
        ("expired", WaitEndKind.EXPIRED),
    ]
    assert await store.get("anna", "closed") is None and records[0].shown_text == SHOWN
    assert [r.helper_id for r in await store.reads.wait_records("anna", helper_id="expired")] == ["expired"]


async def test_records_are_one_owners_and_go_after_their_keep(store: HelperStore) -> None:  # noqa: F811
    await store.insert_admitted(asked_row("old"))  # type: ignore[arg-type]
    await store.insert_admitted(asked_row("new"))  # type: ignore[arg-type]
    await store.insert_admitted(asked_row("hers", owner="bea"))  # type: ignore[arg-type]
    await store.write_state(
        "anna", "old", 1, 5, end("old", WaitEndKind.EXPIRED, NOW - timedelta(days=31)), state=RowState.EXPIRED
    )
    await store.write_state(
        "anna", "new", 1, 5, end("new", WaitEndKind.EXPIRED, NOW - timedelta(days=29)), state=RowState.EXPIRED
    )
    await store.write_state("bea", "hers", 1, 5, end("hers", WaitEndKind.EXPIRED), state=RowState.EXPIRED)
    assert [r.helper_id for r in await store.reads.wait_records("anna")] == ["new", "old"]
    assert [r.owner for r in await store.reads.wait_records("bea")] == ["bea"]

    assert await store.forget_wait_records(NOW - timedelta(days=30)) == 1
    assert [r.helper_id for r in await store.reads.wait_records("anna")] == ["new"]


async def test_the_inbox_lists_the_owners_waits_that_still_take_an_answer(store: HelperStore) -> None:  # noqa: F811
    wall = datetime.now(UTC)  # the inbox counts reminders and drops a wait past its bound by the wall clock
    delivered = wall - timedelta(hours=3)
    await store.insert_admitted(asked_row("asks"))  # type: ignore[arg-type]
    schedule: dict[str, object] = {
        "wait_ends_at": wall + timedelta(hours=1),
        "wait_reminders_ms": [3_600_000, 14_400_000],
    }
    assert await store.write_state("anna", "asks", 1, 5, state=RowState.DELIVERED, delivered_at=delivered, **schedule)  # type: ignore[arg-type]
    await store.insert_admitted(
        row("unreported", state=RowState.UNREPORTED, outcome_kind=OutcomeKind.AUTHORIZATION, summary="needs: mail")
    )
    await store.insert_admitted(row("done", state=RowState.DELIVERED, outcome_kind=OutcomeKind.COMPLETED))
    await store.insert_admitted(asked_row("denied"))  # type: ignore[arg-type]
    await store.write_state("anna", "denied", 1, 5, end("denied", WaitEndKind.DENIED), state=RowState.DELIVERED)
    await store.insert_admitted(asked_row("answered"))  # type: ignore[arg-type]
    followed = FollowedUp(helper_id="answered", seq=1, generation=3, state=RowState.DELIVERED)
    await store.insert_admitted(row("answered.answer", seq=2, follow_up_of="answered"), followed)
    await store.insert_admitted(asked_row("past"))  # type: ignore[arg-type]
    await store.write_state(
        "anna", "past", 1, 5, state=RowState.DELIVERED, wait_ends_at=datetime.now(UTC) - timedelta(seconds=1)
    )
    await store.insert_admitted(asked_row("hers", owner="bea"))  # type: ignore[arg-type]

    waits = await store.reads.waits("anna")
    assert [wait.helper_id for wait in waits] == ["asks", "unreported"]
    asks, unreported = waits
    assert (asks.kind, asks.question_id, asks.text, asks.choices) == (WaitKind.QUESTION, "venue", SHOWN, VENUE)
    assert (asks.delivered_at, asks.expires_at) == (delivered, wall + timedelta(hours=1))
    assert asks.reminders_sent == 1  # of 1 h and 4 h after delivery, 3 h ago
    assert (unreported.kind, unreported.question_id, unreported.text) == (
        WaitKind.AUTHORIZATION,
        "authorization",
        "needs: mail",
    )
    assert (unreported.delivered_at, unreported.expires_at, unreported.reminders_sent) == (None, None, 0)
    assert [wait.helper_id for wait in await store.reads.waits("bea")] == ["hers"]


async def test_audit_pages_newest_first_through_ties_and_keeps_to_one_helper(
    store: HelperStore,  # noqa: F811
    tmp_path: Path,
) -> None:
    """R56: pages of `audit` meet without a gap or a repeat, also through records that ended at the same moment;
    a token it did not give and a limit out of range are invalid requests."""
    for number in range(7):
        helper_id = f"h{number}"
        await store.insert_admitted(asked_row(helper_id))  # type: ignore[arg-type]
        at = NOW - timedelta(minutes=number // 3)  # three records end at each moment
        await store.write_state("anna", helper_id, 1, 5, end(helper_id, WaitEndKind.CLOSED, at), state=RowState.CLOSED)
    reader = StoreReader(Settings(results_dir=tmp_path), store.reads)
    seen, before, pages = [], None, 0
    while True:
        page = await reader.audit("anna", before=before, limit=2)
        seen += [(record.ended_at, record.helper_id) for record in page.records]
        pages += 1
        if page.next is None:
            break
        before = page.next
    assert pages == 4 and len(seen) == 7 and seen == sorted(seen, reverse=True)
    assert [r.helper_id for r in (await reader.audit("anna", helper_id="h4")).records] == ["h4"]
    assert (await reader.audit("bea")).records == []
    with pytest.raises(InvalidRequest, match="before"):
        await reader.audit("anna", before="not-a-token")
    with pytest.raises(InvalidRequest, match="limit"):
        await reader.audit("anna", limit=201)
