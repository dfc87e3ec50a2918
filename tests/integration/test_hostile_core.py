"""A core that answers slowly, too much, or for the wrong session, on the time-skipping server (R35-R38).

Each test is one case seen with an independent core: the real worker, the real workflows, a
fake core speaking real HTTP. Limits are short (deadline 60 s, grace 30 s) so a retried call in real time
costs little; the timers in between are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.session import SessionActivities
from clients.core_client import CoreClient
from contracts.core_api import Action, CreateSession, QuestionChoices, QuestionOption, SessionLimits, SessionStatus
from domain.bounds import PAYLOAD_MAX_BYTES, ROW_ACTIONS_MAX
from domain.limits import FollowTuning, Limits
from domain.messages.activities import FollowRequest, Verdict
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from protocol.errors import InvalidRequest
from protocol.names import helper_workflow_id
from store.helper_store import HelperStore
from tests.conftest import POSTGRES_URL
from tests.fakes.fake_core import FAKE_QUESTION, FakeCore, serving_fake_core
from tests.helpers import (
    eventually,
    eventually_skipping,
    fresh_postgres_database,
    helper_request,
    history_events,
    skip_time,
)
from tests.integration.stack import time_stack
from tests.store.test_helper_store import row
from workflows import options

CLOSED_PORT = "http://127.0.0.1:9"
SHORT = Limits(deadline_ms=60_000, grace_ms=30_000)
CHECK_MS = 400
_AT = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
FOLLOW = FollowTuning(poll_ms=50, window_ms=100, resume_ms=60_000, silence_ms=600_000, bad_answers=3)


SHORT_POLICY: dict[str, Any] = {"limits": SHORT, "follow": FOLLOW, "check_ms": CHECK_MS}
# For the tests that wait in real time for the follow to see something: one follow attempt outlasts the test,
# so no retry waits on its timer (that server skips time only while a test waits on it), however slow the
# machine is to poll within a short window.
PATIENT_POLICY: dict[str, Any] = SHORT_POLICY | {"follow": FOLLOW.model_copy(update={"window_ms": 600_000})}


async def _final(store: HelperStore, owner: str, helper_id: str) -> HelperRow | None:
    row = await store.get(owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


class RunningSessions:
    """Samples the core while a test runs: the most sessions running at once (R6, R38)."""

    def __init__(self, core: FakeCore) -> None:
        self.core, self.most = core, 0
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            running = [s for s in list(self.core.sessions.values()) if not s.status.is_terminal]
            self.most = max(self.most, len(running))
            await asyncio.sleep(0.005)

    async def stop(self) -> int:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return self.most


async def test_a_create_answered_too_late_never_leaves_a_session_running(time_env: WorkflowEnvironment, tmp_path):
    """R9, R38, R35, R7, R2: the core makes the session but answers every create after HELPER_CHECK_MS. At the
    hard ceiling the helper fails with a plain sentence (no longer open: another helper is admitted), then finds
    the session by its key, cancels and resets it before the slot passes on: the owner never has more running
    sessions than slots."""
    core = FakeCore(create_delay_s=1.0)  # longer than the 0.4 s call bound, shorter than recovery's 1.6 s
    async with time_stack(time_env, tmp_path, core, max_running=1, max_open=2, **SHORT_POLICY) as stack:
        client, store = stack.client, stack.store
        sessions = RunningSessions(core)
        assert (await client.start(helper_request("ann", "slow-start"))).status == "running"
        assert (await client.start(helper_request("ann", "next"))).status == "waiting"
        await eventually(lambda: core.create_calls >= 1)
        await skip_time(time_env, timedelta(seconds=95), chunk=timedelta(seconds=5))
        row = await eventually(lambda: _final(store, "ann", "slow-start"), timeout=60)
        assert row.outcome_kind is OutcomeKind.FAILED
        assert "did not confirm the start of the work in time" in (row.summary or "")
        # Its outcome can be read, so it no longer counts as open, even while it still looks for the session (R2).
        assert (await client.start(helper_request("ann", "third"))).status == "waiting"
        # The waiting helper got the slot only after the lost session was found and stopped.
        await eventually(lambda: core.session_of("next") is not None, timeout=60)
        core.create_delay_s = 0
        most = await sessions.stop()
    first = [key for key in core.by_key if "slow-start" in key]
    assert len(first) == 1, "one idempotency key, so one session, however often the create was sent"
    assert core.sessions.get(core.by_key[first[0]]) is None, "the found session was reset"
    assert core.cancel_calls >= 1 and core.reset_calls >= 1
    assert most <= 1, f"{most} sessions ran at once with one slot"


async def test_a_huge_snapshot_is_summarized_in_payloads_and_kept_whole(time_env: WorkflowEnvironment, tmp_path):
    """R36, R18: 10,000 actions and a 5 MB message in one snapshot: the payloads that cross Temporal stay under
    256 KB, the row shows the first actions, and the result directory keeps every action and the whole
    message. The helper completes at once instead of retrying an oversized result until its ceiling."""
    core = FakeCore(misbehave="huge_actions", misbehave_on={"snapshot"})
    async with time_stack(time_env, tmp_path, core, **{**SHORT_POLICY, "check_ms": 5_000}) as stack:
        client, store = stack.client, stack.store
        await client.start(helper_request("bo", "batch"))
        session = await eventually(lambda: core.session_of("batch"))
        session.add_step(1_000, 100, "x" * 5_000_000)
        session.end(SessionStatus.COMPLETED)
        await skip_time(time_env, timedelta(seconds=70), chunk=timedelta(seconds=5))  # the follow's next attempt
        row = await eventually(lambda: _final(store, "bo", "batch"), timeout=60)
        events = await history_events(time_env.client, helper_workflow_id("bo", "batch"))
    assert row.outcome_kind is OutcomeKind.COMPLETED
    assert len(row.actions) == ROW_ACTIONS_MAX
    assert len(row.last_message) < 100_000
    largest = max(event.ByteSize() for event in events)
    assert largest < PAYLOAD_MAX_BYTES, f"a history event of {largest} bytes"
    directory = Path(row.result_dir)
    record = json.loads((directory / "outcome.json").read_text())
    assert len(record["actions"]) == 10_000
    full_text = (directory / "outcome.md").read_text()
    assert full_text.count("x" * 1000) >= 4_000  # the whole 5 MB message


async def test_a_slow_cancel_does_not_hold_a_closed_helper(time_env: WorkflowEnvironment, tmp_path):
    """R35, R7, R21: the core stops the turn at once but answers the cancel only after 3 s (past every call
    bound). The follow sees the stop, so the closed outcome and the slot's hand-off come before the cancel has
    used its attempts, not after them."""
    core = FakeCore(cancel_delay_s=3.0)
    async with time_stack(time_env, tmp_path, core, max_running=1, max_open=2, **PATIENT_POLICY) as stack:
        client, store = stack.client, stack.store
        await client.start(helper_request("cy", "long"))
        await client.start(helper_request("cy", "next"))
        session = await eventually(lambda: core.session_of("long"))
        session.add_step(500, 50, "halfway")
        await client.close("cy", "long")
        row = await eventually(lambda: _final(store, "cy", "long"), timeout=30)
        await eventually(lambda: core.session_of("next") is not None, timeout=30)
        cancels_by_then = core.cancel_calls
    assert row.outcome_kind is OutcomeKind.CLOSED and row.state is RowState.CLOSED
    assert cancels_by_then < options.CANCEL_ATTEMPTS, "the slot passed on only after every cancel attempt"


async def test_a_slow_finish_now_still_gives_the_cores_partial(time_env: WorkflowEnvironment, tmp_path):
    """R35, R15: at the deadline the core finishes at once but answers finish-now after 3 s. The follow sees
    the partial outcome: the helper reports the core's text with the deadline, not 'did not finish'."""
    core = FakeCore(finish_delay_s=3.0, on_finish="partial")
    async with time_stack(time_env, tmp_path, core, **SHORT_POLICY) as stack:
        client, store = stack.client, stack.store
        await client.start(helper_request("di", "report"))
        session = await eventually(lambda: core.session_of("report"))
        session.add_step(800, 80, "two of three chapters")
        await skip_time(time_env, timedelta(seconds=61), chunk=timedelta(seconds=5))
        row = await eventually(lambda: _final(store, "di", "report"), timeout=30)
    assert row.outcome_kind is OutcomeKind.PARTIAL
    assert "deadline of 1 minute" in (row.summary or "")
    assert "two of three chapters" in (row.summary or "")
    assert "did not finish" not in (row.summary or "")
    assert row.finished_at is not None and row.started_at is not None
    assert row.finished_at - row.started_at < timedelta(seconds=90)


async def test_absurd_counters_never_reach_the_store(time_env: WorkflowEnvironment, tmp_path):
    """R37: output tokens of 2^64-5 are a malformed answer: counted as bad answers, never written; the helper
    fails with a plain sentence and every store write succeeds."""
    core = FakeCore(misbehave="overflow", misbehave_on={"snapshot"})
    async with time_stack(time_env, tmp_path, core, **PATIENT_POLICY) as stack:
        client, store = stack.client, stack.store
        await client.start(helper_request("ed", "count"))
        row = await eventually(lambda: _final(store, "ed", "count"), timeout=30)
    assert row.outcome_kind is OutcomeKind.FAILED
    assert "could not be read" in (row.summary or "")
    assert row.work_tokens < 2**40


async def test_a_snapshot_of_another_session_is_refused(time_env: WorkflowEnvironment, tmp_path):
    """R37: a snapshot whose session_id is another session's never becomes this helper's outcome."""
    core = FakeCore(misbehave="wrong_session", misbehave_on={"snapshot"})
    async with time_stack(time_env, tmp_path, core, **PATIENT_POLICY) as stack:
        client, store = stack.client, stack.store
        await client.start(helper_request("fa", "mine"))
        row = await eventually(lambda: _final(store, "fa", "mine"), timeout=30)
    assert row.outcome_kind is OutcomeKind.FAILED
    assert "payroll" not in (row.summary or "").lower()
    assert "could not be read" in (row.summary or "")


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def test_control_characters_never_reach_the_store(time_env: WorkflowEnvironment, tmp_path, backend: str):
    """R37 (NUL): a core whose texts carry NUL and escape characters is stripped before anything is
    stored, so the writes succeed on PostgreSQL too (a NUL fails its inserts) and the outcome reads as the
    session's; a task with a NUL is refused at the door and writes nothing."""
    core = FakeCore(misbehave="nul", misbehave_on={"snapshot"})
    async with contextlib.AsyncExitStack() as stack_scope:
        store_url = None
        if backend == "postgresql":
            store_url = await stack_scope.enter_async_context(fresh_postgres_database(POSTGRES_URL))
        stack = await stack_scope.enter_async_context(
            time_stack(time_env, tmp_path, core, store_url=store_url, **SHORT_POLICY)
        )
        client, store = stack.client, stack.store
        with pytest.raises(InvalidRequest, match="control character"):
            await client.start(helper_request("nu", "dirty", task="Find the report\x00 and mail it"))
        await client.start(helper_request("nu", "clean"))
        session = await eventually(lambda: core.session_of("clean"))
        session.actions.append(Action(tool="send_mail", whom="bob@example.com", what="sent the report", at=_AT))
        session.add_step(1_000, 100, "Found the report in the shared drive.")
        session.end(SessionStatus.COMPLETED, "The Q3 report is in the shared drive.")
        row = await eventually_skipping(time_env, lambda: _final(store, "nu", "clean"))
        assert await store.get("nu", "dirty") is None
    assert row.outcome_kind is OutcomeKind.COMPLETED
    assert row.summary is not None and "The Q3 report is in the shared drive." in row.summary
    stored = json.dumps(row.model_dump(mode="json"))
    assert not any(character in stored for character in ("\x00", "\x1b", "\\u0000", "\\u001b"))
    assert [(a.whom, a.what) for a in row.actions] == [("bob@example.com", "sent the report")]


VENUE = QuestionChoices(
    question_id="venue",
    options=[QuestionOption(id="walk", label="Walking distance"), QuestionOption(id="taxi", label="A taxi is fine")],
)


@pytest.mark.parametrize("misbehaviour", ["too_many_options", "duplicate_option_ids", "overlong_label"])
async def test_choices_out_of_bounds_never_reach_the_store(
    time_env: WorkflowEnvironment, tmp_path: Path, misbehaviour: str
) -> None:
    """R37, R49: a question offering eleven options, two options of one id or an overlong label is a malformed
    answer, counted like every bad answer: the helper fails with a plain sentence and nothing of the question
    is stored."""
    core = FakeCore(misbehave=misbehaviour, misbehave_on={"snapshot"})
    async with time_stack(time_env, tmp_path, core, **PATIENT_POLICY) as stack:
        client, store = stack.client, stack.store
        await client.start(helper_request("qa", "ask"))
        session = await eventually(lambda: core.session_of("ask"))
        session.question, session.choices, session.status = "Walk or taxi?", VENUE, SessionStatus.QUESTION
        row = await eventually(lambda: _final(store, "qa", "ask"), timeout=30)
    assert row.outcome_kind is OutcomeKind.FAILED
    assert "could not be read" in (row.summary or "")
    assert core.snapshot_calls >= FOLLOW.bad_answers
    stored = json.dumps(row.model_dump(mode="json"))
    assert not any(text in stored for text in ("Walk or taxi?", FAKE_QUESTION, "Walking distance", "Option 10"))


async def test_a_question_renamed_at_every_read_ends_with_the_last_name_the_follow_judged(tmp_path: Path) -> None:
    """R49, R37: a core that renames its question at every read (while it still runs, then as it asks): the follow's
    result carries the choices of the snapshot it judged, the last one read, never an earlier name."""
    core = FakeCore(misbehave="drifting_question_id", misbehave_on={"snapshot"})
    async with serving_fake_core(core) as url:
        client = CoreClient(url, 2_000)
        store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
        try:
            await store.insert_admitted(row("h1", state=RowState.RUNNING, generation=2))
            session_id = (await client.create(_create("anna", "h1"))).session_id
            session = core.sessions[session_id]
            session.add_step(1_000, 100, "comparing venues")
            session.question, session.choices = "Walk or taxi?", VENUE  # shown early: not read while running
            request = FollowRequest(
                owner="anna",
                helper_id="h1",
                seq=1,
                session_id=session_id,
                generation=2,
                ceiling_tokens=10**9,
                tuning=FOLLOW.model_copy(update={"window_ms": 600_000}),
                check_ms=2_000,
            )
            following = asyncio.create_task(
                ActivityEnvironment().run(SessionActivities(store, client).follow_session, request)
            )
            await eventually(lambda: len(core.question_ids_sent) >= 3)
            session.status = SessionStatus.QUESTION
            result = await asyncio.wait_for(following, 30)
        finally:
            await store.close()
            await client.aclose()
    assert result.verdict is Verdict.QUESTION and result.choices is not None
    assert result.choices.question_id == core.question_ids_sent[-1] != core.question_ids_sent[0]
    assert result.choices.options == VENUE.options


def _create(owner: str, helper_id: str) -> CreateSession:
    return CreateSession(
        idempotency_key=f"helpers/{owner}/{helper_id}/run-1",
        owner=owner,
        helper_id=helper_id,
        task="Pick a venue",
        language="en",
        model="scripted",
        limits=SessionLimits(max_steps=80, max_input_tokens=4_000_000),
    )
