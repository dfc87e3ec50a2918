"""Each way a wait for the owner ends leaves one record (R56), on the time-skipping server with the real worker, a
fake core and the reference chat: answered, expired, closed, and followed up by hand, each with who answered as the
caller said, and exactly what the row showed with its SHA-256 digest. Granted and denied authorizations:
tests/e2e/test_answers.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from contracts.core_api import SessionStatus
from domain.audit import WaitEndKind, WaitKind, WaitRecord, shown_digest
from domain.messages.updates import AnswerRequest, Decider, OwnerAnswer
from domain.rows import RowState
from protocol.errors import HelperRefused
from starter.inputs import answer_requests, delivered_request, read_request
from tests.helpers import eventually, eventually_skipping, helper_request, skip_time
from tests.integration.test_waits import HOUR, VENUE, Rig, rig  # noqa: F401  (the rig fixture)

OWNER = "wyn"


async def asked(rig: Rig, helper_id: str, *, deliver: bool = True) -> str:  # noqa: F811
    """A helper of OWNER's asks; the chat's turn reads and delivers it. Answers the summary the row shows."""
    await rig.client.start(helper_request(OWNER, helper_id))
    session = await eventually(lambda: rig.core.session_of(helper_id))
    session.question, session.choices, session.status = "Walk or taxi?", VENUE, SessionStatus.QUESTION
    row = await eventually_skipping(rig.env, lambda: _finished(rig, helper_id))
    await eventually_skipping(rig.env, lambda: _told(rig, helper_id))  # the coordinator has its finished notice
    if deliver:
        await rig.client.read(read_request(OWNER, f"t-{helper_id}", [helper_id]))
        await rig.client.delivered(delivered_request(OWNER, f"t-{helper_id}", answer_chars=80))
    assert row.summary
    return str(row.summary)


async def _told(rig: Rig, helper_id: str) -> bool:  # noqa: F811
    return any(helper_id in event["helper_ids"] for event in await rig.events(OWNER))


async def _finished(rig: Rig, helper_id: str) -> object:  # noqa: F811
    row = await rig.store.get(OWNER, helper_id)
    return row if row is not None and row.state is RowState.UNREPORTED else None


async def one_record(rig: Rig, helper_id: str) -> WaitRecord:  # noqa: F811
    records = await eventually(lambda: rig.store.reads.wait_records(OWNER, helper_id=helper_id))
    assert len(records) == 1
    record: WaitRecord = records[0]
    assert record.shown_sha256 == shown_digest(record.shown_text, record.shown_choices)
    return record


def answer(helper_id: str, question_id: str, option_id: str, by: str | None = "owner") -> AnswerRequest:
    return AnswerRequest(
        owner=OWNER,
        helper_id=helper_id,
        answer=OwnerAnswer(question_id=question_id, option_id=option_id),
        decider=Decider(by=by, via="telegram", through="api"),
    )


async def test_an_answered_question_is_recorded_once_with_who_answered_and_what_was_shown(rig: Rig) -> None:  # noqa: F811
    shown = await asked(rig, "q1")
    await rig.client.answer(answer("q1", "venue", "taxi"))
    await rig.client.answer(answer("q1", "venue", "walk", by="someone else"))  # repeated: no second record
    record = await one_record(rig, "q1")
    assert (record.ended, record.kind, record.follow_up) == (WaitEndKind.ANSWERED, WaitKind.QUESTION, "q1.answer")
    assert record.answer == OwnerAnswer(question_id="venue", option_id="taxi")
    assert (record.decider.by, record.decider.via, record.decider.through) == ("owner", "telegram", "api")
    assert (record.shown_text, record.shown_choices) == (shown, VENUE)
    assert record.delivered_at is not None and record.asked_at is not None and record.session_id is not None


async def test_an_expired_wait_is_recorded_at_its_bound_with_the_reminders_sent(rig: Rig) -> None:  # noqa: F811
    await asked(rig, "late")
    await skip_time(rig.env, 3 * HOUR + timedelta(minutes=5))
    record = await one_record(rig, "late")
    delivered_at = (await rig.row(OWNER, "late")).delivered_at
    assert delivered_at is not None
    assert (record.ended, record.reminders_sent, record.answer) == (WaitEndKind.EXPIRED, 2, None)
    assert record.ended_at == delivered_at + 3 * HOUR


async def test_a_close_and_a_follow_up_by_hand_end_a_wait_once_each_and_a_closed_unreported_one_too(
    rig: Rig,  # noqa: F811
) -> None:
    await asked(rig, "closed")
    await asked(rig, "early", deliver=False)
    await asked(rig, "taken")
    await rig.client.close(OWNER, "closed")
    await rig.client.close(OWNER, "closed")
    await rig.client.close(OWNER, "early")
    await rig.client.start(helper_request(OWNER, "taken.more", follow_up="taken"))
    closed, early, taken = [await one_record(rig, h) for h in ("closed", "early", "taken")]
    assert (closed.ended, early.ended, taken.ended) == (WaitEndKind.CLOSED, WaitEndKind.CLOSED, WaitEndKind.FOLLOWED_UP)
    assert early.delivered_at is None and taken.follow_up == "taken.more"
    assert await rig.store.get(OWNER, "closed") is None
    # After its row is gone, the record stays.
    await skip_time(rig.env, 30 * HOUR)
    assert await rig.store.get(OWNER, "taken") is None
    assert {r.helper_id for r in await rig.store.reads.wait_records(OWNER)} == {"closed", "early", "taken"}
    # A late answer is refused with how its wait ended, for as long as the record is kept (R56).
    for helper_id, how in (("closed", "the helper was closed"), ("taken", "another helper continued it")):
        with pytest.raises(HelperRefused) as refused:
            await rig.client.answer(answer(helper_id, "venue", "walk"))
        assert refused.value.code == "wait_ended" and how in refused.value.message, refused.value.message
        assert refused.value.details["ended"] in ("closed", "followed_up")
    assert rig.core.session_of("closed.answer") is None


async def test_the_inbox_lists_a_wait_with_its_bound_and_reminders_until_its_answer(rig: Rig) -> None:  # noqa: F811
    """R56: every wait that still takes an answer, from the store; an answer takes it out. (A restart between the
    wait and its answer: tests/e2e/test_restarts.py.)"""
    shown = await asked(rig, "q1")
    await asked(rig, "q2", deliver=False)
    await skip_time(rig.env, HOUR + timedelta(minutes=1))
    delivered_at = (await rig.row(OWNER, "q1")).delivered_at
    assert delivered_at is not None
    first, second = await rig.client.waits(OWNER)
    assert (first.helper_id, first.question_id, first.text, first.choices) == ("q1", "venue", shown, VENUE)
    assert first.expires_at == delivered_at + 3 * HOUR
    assert (second.helper_id, second.delivered_at, second.expires_at) == ("q2", None, None)
    await rig.client.answer(answer("q1", "venue", "walk"))
    assert [wait.helper_id for wait in await rig.client.waits(OWNER)] == ["q2"]


async def test_a_batch_answers_each_truly_and_writes_only_the_valid_one(rig: Rig) -> None:  # noqa: F811
    """R56: one valid, one repeated, one refused and one for another owner's helper, in one call: each judged alone
    as `answer` judges it, in the order sent; only the valid one starts anything; the same call again is harmless."""
    await asked(rig, "valid")
    await asked(rig, "before")
    await asked(rig, "wrong")
    await rig.client.answer(answer("before", "venue", "walk"))
    await rig.client.start(helper_request("bea", "hers"))  # another owner's helper
    body = {
        "answers": [
            {"helper_id": "valid", "question_id": "venue", "option_id": "taxi", "by": "owner"},
            {"helper_id": "before", "question_id": "venue", "option_id": "taxi"},
            {"helper_id": "wrong", "question_id": "venue", "option_id": "bike"},
            {"helper_id": "hers", "question_id": "venue", "option_id": "walk"},
        ]
    }
    batch = await rig.client.answer_all(OWNER, answer_requests(OWNER, body, "api"))
    valid, before, wrong, hers = batch.answers
    assert valid.result is not None and not valid.result.repeated and valid.result.follow_up is not None
    assert before.result is not None and before.result.repeated and before.result.option_id == "walk"
    assert wrong.error is not None and wrong.error.code == "not_offered"
    assert hers.error is not None and hers.error.code == "unknown_helper"
    assert rig.core.session_of("wrong.answer") is None and rig.core.session_of("hers.answer") is None
    assert {r.helper_id for r in await rig.store.reads.wait_records(OWNER)} == {"valid", "before"}
    assert await rig.store.reads.wait_records("bea") == []
    again = await rig.client.answer_all(OWNER, answer_requests(OWNER, body, "api"))
    assert [item.result.repeated if item.result else item.error.code for item in again.answers] == [  # type: ignore[union-attr]
        True,
        True,
        "not_offered",
        "unknown_helper",
    ]
    assert len(await rig.store.reads.wait_records(OWNER)) == 2
