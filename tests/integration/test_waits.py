"""Every wait for the owner ends (R54), on the time-skipping server with the real worker, a fake core that asks and
the reference chat: reminders at their offsets from delivery, a distinct `expired` at the bound, the chat told each
once, a late answer refused `expired`, also when the coordinator continued as new between them; an answer before the
bound ends the wait and nothing more is told; an answer racing the expiry, and a close racing both, end it once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from contracts.core_api import QuestionChoices, QuestionOption, SessionStatus
from domain.limits import WaitPolicy
from domain.messages.updates import AnswerRequest, OwnerAnswer
from domain.rows import HelperRow, RowState
from protocol.errors import HelperRefused
from protocol.names import CHAT_IDLE, coordinator_id
from reference.chat.server import running_chat
from starter.client import HelperClient
from starter.inputs import delivered_request, read_request
from store.helper_store import HelperStore
from tests.fakes.fake_core import FakeCore, serving_fake_core
from tests.helpers import eventually, eventually_skipping, helper_request, settings_for, skip_time
from worker import running_worker
from workflows import coordinator

HOUR = timedelta(hours=1)
SECOND = timedelta(seconds=1)
# The long waits look once a skipped minute: a reminder or an expiry an hour apart needs no finer look, and a
# five-second step would cost a slow run minutes of real time.
MINUTE = timedelta(minutes=1)
# Reminded 1 h and 2 h after delivery, expired at 3 h.
WAIT = WaitPolicy(remind_after_ms=(3_600_000, 7_200_000), expire_after_ms=10_800_000)
VENUE = QuestionChoices(
    question_id="venue", options=[QuestionOption(id="walk", label="Walking"), QuestionOption(id="taxi", label="Taxi")]
)


def _answer(owner: str, option_id: str) -> AnswerRequest:
    return AnswerRequest(owner=owner, helper_id="venue", answer=OwnerAnswer(question_id="venue", option_id=option_id))


class Rig:
    def __init__(self, env: WorkflowEnvironment, core: FakeCore, client: HelperClient, store: HelperStore, chat: str):
        self.env, self.core, self.client, self.store, self.chat_url = env, core, client, store, chat

    async def events(self, owner: str) -> list[dict[str, Any]]:
        async with httpx.AsyncClient() as http:
            return list((await http.get(f"{self.chat_url}/v1/owners/{owner}/events")).json())

    async def kinds(self, owner: str) -> list[str]:
        return [event["kind"] for event in await self.events(owner)]

    async def row(self, owner: str, helper_id: str) -> HelperRow:
        row = await self.store.get(owner, helper_id)
        assert row is not None
        return row

    async def delivered_question(self, owner: str) -> None:
        """A helper asks, the chat hears, a turn reads and delivers it: the wait starts."""
        await self.client.start(helper_request(owner, "venue"))
        session = await eventually(lambda: self.core.session_of("venue"))
        session.question, session.choices, session.status = "Walk or taxi?", VENUE, SessionStatus.QUESTION
        await eventually_skipping(self.env, lambda: self._kinds_are(owner, ["ready"]))
        await self.client.read(read_request(owner, "t-1", ["venue"]))
        assert (await self.client.delivered(delivered_request(owner, "t-1", answer_chars=80))).delivered == ["venue"]

    async def _kinds_are(self, owner: str, kinds: list[str]) -> bool:
        return await self.kinds(owner) == kinds

    async def skip_to(self, moment: datetime) -> None:
        await skip_time(self.env, moment - await self.env.get_current_time())

    async def bound(self, owner: str) -> datetime:
        delivered_at = (await self.row(owner, "venue")).delivered_at
        assert delivered_at is not None
        return delivered_at + timedelta(milliseconds=WAIT.expire_after_ms or 0)

    async def run_id(self, owner: str) -> str:
        return (await self.env.client.get_workflow_handle(coordinator_id(owner)).describe()).run_id


@pytest.fixture
async def rig(time_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Rig]:
    core = FakeCore()
    async with serving_fake_core(core) as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, skipping_time=True, wait=WAIT)
        store = await HelperStore.connect(settings.store, run_migrations=True)
        try:
            async with running_worker(time_env.client, settings):
                yield Rig(time_env, core, HelperClient(settings, store.reads, time_env.client), store, chat_url)
        finally:
            with contextlib.suppress(Exception):
                await store.close()


async def test_an_unanswered_question_is_reminded_twice_then_expires_and_a_late_answer_is_refused(rig: Rig) -> None:
    await rig.delivered_question("wes")
    await skip_time(rig.env, HOUR - timedelta(minutes=5))
    assert await rig.kinds("wes") == ["ready"]
    await eventually_skipping(
        rig.env, lambda: rig._kinds_are("wes", ["ready", "reminder"]), budget=15 * 60 * SECOND, step=MINUTE
    )
    reminder = (await rig.events("wes"))[-1]
    assert "venue" in reminder["text"] and "Walking / Taxi" in reminder["text"]
    await eventually_skipping(
        rig.env, lambda: rig._kinds_are("wes", ["ready", "reminder", "reminder"]), budget=75 * 60 * SECOND, step=MINUTE
    )
    assert (await rig.row("wes", "venue")).state is RowState.DELIVERED
    await eventually_skipping(
        rig.env,
        lambda: rig._kinds_are("wes", ["ready", "reminder", "reminder", "expired"]),
        budget=75 * 60 * SECOND,
        step=MINUTE,
    )
    assert "expired unanswered; nothing was done" in (await rig.events("wes"))[-1]["text"]
    assert (await rig.row("wes", "venue")).state is RowState.EXPIRED
    with pytest.raises(HelperRefused) as refused:
        await rig.client.answer(_answer("wes", "walk"))
    assert refused.value.code == "expired" and "expired unanswered at" in refused.value.message
    assert rig.core.session_of("venue.answer") is None
    keys = [event["key"] for event in await rig.events("wes")]
    assert len(set(keys)) == 4


async def test_an_answer_before_the_bound_ends_the_wait_and_nothing_more_is_told(rig: Rig) -> None:
    await rig.delivered_question("xia")
    await eventually_skipping(
        rig.env, lambda: rig._kinds_are("xia", ["ready", "reminder"]), budget=75 * 60 * SECOND, step=MINUTE
    )
    answer = await rig.client.answer(_answer("xia", "taxi"))
    assert answer.follow_up is not None
    await skip_time(rig.env, 4 * HOUR)
    # Only the follow-up's own outcome (it ran to its deadline meanwhile) is told after the answer.
    later = (await rig.events("xia"))[2:]
    assert [(event["kind"], event["helper_ids"]) for event in later] == [("ready", ["venue.answer"])]
    assert (await rig.row("xia", "venue")).state is RowState.DELIVERED


async def test_reminders_and_the_expiry_are_each_told_once_across_continue_as_new_between_them(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    await rig.delivered_question("yun")
    await eventually_skipping(
        rig.env, lambda: rig._kinds_are("yun", ["ready", "reminder"]), budget=75 * 60 * SECOND, step=MINUTE
    )
    first_run = await rig.run_id("yun")
    monkeypatch.setattr(coordinator, "MAX_MESSAGES_PER_RUN", 1)  # the worker runs in this process
    await rig.env.client.get_workflow_handle(coordinator_id("yun")).signal(CHAT_IDLE)
    await eventually(lambda: _continued(rig, "yun", first_run))
    monkeypatch.undo()
    await eventually_skipping(
        rig.env,
        lambda: rig._kinds_are("yun", ["ready", "reminder", "reminder", "expired"]),
        budget=150 * 60 * SECOND,
        step=MINUTE,
    )
    assert (await rig.row("yun", "venue")).state is RowState.EXPIRED
    with pytest.raises(HelperRefused) as refused:
        await rig.client.answer(_answer("yun", "walk"))
    assert refused.value.code == "expired"
    await skip_time(rig.env, HOUR)
    assert len({event["key"] for event in await rig.events("yun")}) == len(await rig.events("yun")) == 4


async def _continued(rig: Rig, owner: str, first_run: str) -> bool:
    return await rig.run_id(owner) != first_run


async def _answer_or_refusal(rig: Rig, request: AnswerRequest) -> str:
    """`answered` or the refusal's code."""
    try:
        await rig.client.answer(request)
    except HelperRefused as refused:
        return refused.code
    return "answered"


async def _ended_once(rig: Rig, owner: str, answered: str) -> None:
    """Exactly one end, and the loser told which: an accepted answer started its follow-up and the chat never hears
    of an expiry; an expiry refused the answer `expired` and started nothing."""
    kinds = await rig.kinds(owner)
    assert kinds.count("expired") <= 1
    if answered == "answered":
        assert "expired" not in kinds and rig.core.session_of("venue.answer") is not None
        assert await _answer_or_refusal(rig, _answer(owner, "walk")) == "answered"  # repeated: the same end
    else:
        assert rig.core.session_of("venue.answer") is None
        assert await _answer_or_refusal(rig, _answer(owner, "walk")) == answered


@pytest.mark.parametrize("lead_s", [-2, 0, 2])
async def test_an_answer_racing_the_expiry_ends_the_wait_once(rig: Rig, lead_s: int) -> None:
    owner = f"race{lead_s + 2}"
    await rig.delivered_question(owner)
    await rig.skip_to(await rig.bound(owner) + timedelta(seconds=lead_s) - SECOND)
    answered, _ = await asyncio.gather(
        _answer_or_refusal(rig, _answer(owner, "taxi")), rig.env.sleep(timedelta(seconds=2))
    )
    assert answered in ("answered", "expired")
    await skip_time(rig.env, timedelta(minutes=10))
    state = (await rig.row(owner, "venue")).state
    assert state is (RowState.DELIVERED if answered == "answered" else RowState.EXPIRED)
    if answered == "expired":
        assert (await rig.kinds(owner)).count("expired") == 1
    await _ended_once(rig, owner, answered)


@pytest.mark.parametrize("lead_s", [-2, 0, 2])
async def test_a_close_racing_an_answer_and_the_expiry_ends_the_wait_once_and_the_row_goes(
    rig: Rig, lead_s: int
) -> None:
    owner = f"close{lead_s + 2}"
    await rig.delivered_question(owner)
    await rig.skip_to(await rig.bound(owner) + timedelta(seconds=lead_s) - SECOND)
    answered, closed, _ = await asyncio.gather(
        _answer_or_refusal(rig, _answer(owner, "taxi")),
        rig.client.close(owner, "venue"),
        rig.env.sleep(timedelta(seconds=2)),
    )
    assert closed.state is RowState.CLOSED and closed.removed
    # Closed first, the answer found the row closed, or gone and its wait's record saying so.
    assert answered in ("answered", "expired", "not_answerable", "wait_ended")
    await skip_time(rig.env, timedelta(minutes=10))
    assert await rig.store.get(owner, "venue") is None
    kinds = await rig.kinds(owner)
    assert kinds.count("expired") <= 1
    if answered == "answered":
        assert "expired" not in kinds and rig.core.session_of("venue.answer") is not None
    else:
        assert rig.core.session_of("venue.answer") is None
