"""The store on SQLite and on PostgreSQL: migrations, guarded writes, reads (R4, R19, R27, R29, R31, R34).

Every test runs on both backends. On PostgreSQL each test gets its own schema (set as the connection's
search_path), so tests never see each other's rows; the schema is dropped afterwards. When no
PostgreSQL server answers, the PostgreSQL half is skipped with the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import create_async_engine

from contracts.core_api import Action, QuestionChoices, QuestionOption
from domain.limits import Limits
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from domain.work import Usage
from store.database import head_revision, migrate
from store.helper_store import HelperStore, RowChanges, RowOfAnotherAdmission
from tests.conftest import POSTGRES_URL
from tests.helpers import admitted_row, chat_events, parked_of, rows_of, without_postgres

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TABLES = {"helper_rows", "helper_usage", "chat_events", "parked_sessions", "alembic_version"}
DATETIME_FIELDS = (
    "admitted_at",
    "started_at",
    "deadline_at",
    "finished_at",
    "delivered_at",
    "keep_until",
    "updated_at",
)


async def _postgres_unreachable() -> str | None:
    """Why PostgreSQL cannot be used, or None when a server answers."""
    probe = create_async_engine(POSTGRES_URL, connect_args={"timeout": 5})
    try:
        async with probe.connect():
            return None
    except (OSError, TimeoutError) as error:  # refused, unreachable or silent; not a server's own error
        return f"no PostgreSQL server answers at {make_url(POSTGRES_URL)!r}: {error!r}"
    finally:
        await probe.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[HelperStore]:
    """A migrated store on a fresh SQLite file, or in a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        sqlite = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'helpers.sqlite3'}", run_migrations=True)
        yield sqlite
        await sqlite.close()
        return
    reason = await _postgres_unreachable()
    if reason is not None:
        without_postgres(reason)
    schema = f"t_{uuid.uuid4().hex[:16]}"
    admin = create_async_engine(POSTGRES_URL)
    async with admin.begin() as connection:
        await connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine = create_async_engine(
        POSTGRES_URL, pool_pre_ping=True, connect_args={"server_settings": {"search_path": schema}}
    )
    postgres = HelperStore(engine)
    try:
        await migrate(engine)
        yield postgres
    finally:
        await postgres.close()
        async with admin.begin() as connection:
            await connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await admin.dispose()


def backend(store: HelperStore) -> str:
    return store.engine.dialect.name


def row(
    helper_id: str = "h1",
    seq: int = 1,
    state: RowState = RowState.WAITING,
    owner: str = "anna",
    **changes: Any,
) -> HelperRow:
    # Every field away from admitted_row's defaults, so a column the store drops or mixes up shows.
    written: dict[str, Any] = {
        "state": state,
        "task": "Find the Q3 report and draft a summary",
        "boundary": ["send the summary to board@example.com"],
        "language": "ru",
        "model": "gpt-large",
        "limits": Limits(deadline_ms=600_000),
    }
    return admitted_row(owner, helper_id, at=T0, seq=seq, **(written | changes))


async def running(store: HelperStore, helper_id: str = "h1", seq: int = 1) -> HelperRow:
    """A row admitted, then started by its helper at generation 2."""
    assert await store.insert_admitted(row(helper_id, seq))
    assert await store.write_state(
        "anna",
        helper_id,
        seq,
        2,
        state=RowState.RUNNING,
        session_id=f"s-{helper_id}",
        started_at=T0,
        deadline_at=T0 + timedelta(minutes=45),
    )
    got = await store.get("anna", helper_id)
    assert got is not None
    return got


# --- migrations -------------------------------------------------------------------------------------


async def test_migrations_create_the_schema_and_rerunning_them_is_a_no_op(store: HelperStore) -> None:
    """R4, R29: the schema exists after the migrations; running them again changes nothing and keeps rows."""

    def table_names(connection: Connection) -> set[str]:
        return set(inspect(connection).get_table_names())

    async with store.engine.connect() as connection:
        assert await connection.run_sync(table_names) >= TABLES
    assert await store.insert_admitted(row())
    await migrate(store.engine)
    await migrate(store.engine)
    async with store.engine.connect() as connection:
        assert await connection.run_sync(table_names) >= TABLES
        versions = (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalars().all()
    assert versions == [head_revision()]
    assert await store.get("anna", "h1") == row()


async def test_connect_on_an_existing_store_keeps_its_rows(tmp_path: Any) -> None:
    """R25, R29: a worker restart runs the migrations again on the same file; rows survive."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'nested' / 'helpers.sqlite3'}"
    first = await HelperStore.connect(url, run_migrations=True)
    assert await first.insert_admitted(row())
    await first.close()
    second = await HelperStore.connect(url, run_migrations=True)
    try:
        assert await second.get("anna", "h1") == row()
    finally:
        await second.close()


# Columns the migrations made that the code no longer declares nor uses: left in place, as a contraction waits for a
# release that drops them (docs/operations.md, "Upgrading"); each has a server default or is nullable, so inserts
# need not name it. Each leaves this list in the release whose migration drops it.
UNDECLARED_COLUMNS = {
    ("helper_rows", "finish_requested"),  # 0001; has a server default
    ("helper_rows", "followed_by"),  # 0006, replaced by follow_replica (0007); may go once no 1.3.0 worker runs
}


async def test_the_migrations_make_the_schema_the_code_declares(store: HelperStore) -> None:
    """The migrated tables, columns, types and indexes are those of `store.schema`, but for the columns no longer
    declared: a migration that adds a column agrees with the code that uses it."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from store.schema import Base

    def differences(connection: Connection) -> list[Any]:
        found: list[Any] = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        return found

    async with store.engine.connect() as connection:
        found = await connection.run_sync(differences)
    undeclared = {(change[2], change[3].name) for change in found if change[0] == "remove_column"}
    assert undeclared == UNDECLARED_COLUMNS
    assert [change for change in found if change[0] != "remove_column"] == []


# --- insert_admitted (R4, R5) ---------------------------------------------------------------------------


async def test_admitted_row_round_trips(store: HelperStore) -> None:
    """R4, R18: the admitted row comes back exactly as written, with every field."""
    admitted = row(goal_id="weekly-mail", boundary=["a", "b"], limits=Limits(max_steps=40))
    assert await store.insert_admitted(admitted)
    assert await store.get("anna", "h1") == admitted


async def test_insert_admitted_is_idempotent_for_the_same_admission(store: HelperStore) -> None:
    """R4, R5: a retried admission write is harmless: False, and the row is unchanged."""
    assert await store.insert_admitted(row())
    assert await store.insert_admitted(row(task="a retry carries the same admission")) is False
    got = await store.get("anna", "h1")
    assert got is not None and got.task == row().task
    assert await rows_of(store, "anna") == [row()]


async def test_insert_admitted_refuses_another_admission(store: HelperStore) -> None:
    """R5, R19: a row of another admission (another seq) is never overwritten."""
    assert await store.insert_admitted(row(seq=1))
    with pytest.raises(ValueError, match="another admission"):
        await store.insert_admitted(row(seq=2))
    assert await store.get("anna", "h1") == row(seq=1)
    # The store still works after the refused write (the failed transaction was not left open).
    assert await store.insert_admitted(row("h2", seq=2))


async def test_the_row_of_an_unrecorded_admission_is_replaced_in_one_step(store: HelperStore) -> None:
    """R4, R19: the row of an admission its coordinator never recorded (seq 7) gives way to the admission that
    counts; the replaced row's result directory is answered, for removal."""
    with_dir = row(seq=7, state=RowState.RUNNING, result_dir="/results/anna/h1/7")
    assert await store.insert_admitted(with_dir)
    with pytest.raises(RowOfAnotherAdmission) as conflict:
        await store.insert_admitted(row(seq=2))
    assert conflict.value.seq == 7

    assert await store.replace_unrecorded(row(seq=2), None, 7) == "/results/anna/h1/7"
    assert await rows_of(store, "anna") == [row(seq=2)]


async def test_a_replacement_names_the_row_it_replaces(store: HelperStore) -> None:
    """R19: a row of another seq than the one named (a third admission's, or one written meanwhile) stays."""
    assert await store.insert_admitted(row(seq=3))
    with pytest.raises(RowOfAnotherAdmission, match="#3"):
        await store.replace_unrecorded(row(seq=2), None, 7)
    assert await rows_of(store, "anna") == [row(seq=3)]
    assert await store.replace_unrecorded(row(seq=2), None, 3) == row(seq=3).result_dir
    with pytest.raises(RowOfAnotherAdmission, match="#2"):  # replaced once: a second replacement finds #2
        await store.replace_unrecorded(row(seq=4), None, 3)
    assert await rows_of(store, "anna") == [row(seq=2)]


# --- write_state (R19) ------------------------------------------------------------------------------------


async def test_write_state_applies_at_a_newer_generation(store: HelperStore) -> None:
    """R19: a newer writer generation applies and is recorded."""
    started = await running(store)
    assert started.state is RowState.RUNNING and started.generation == 2
    assert started.session_id == "s-h1" and started.started_at == T0


async def test_write_state_at_the_same_generation_is_an_idempotent_retry(store: HelperStore) -> None:
    """R19: the same generation again (an activity retry) applies the same values again."""
    await running(store)
    changes: dict[str, Any] = {"state": RowState.UNREPORTED, "outcome_kind": OutcomeKind.COMPLETED, "summary": "ok"}
    assert await store.write_state("anna", "h1", 1, 3, **changes)
    assert await store.write_state("anna", "h1", 1, 3, **changes)
    got = await store.get("anna", "h1")
    assert got is not None and got.generation == 3 and got.state is RowState.UNREPORTED


async def test_stale_write_leaves_the_finalized_row_unchanged(store: HelperStore) -> None:
    """R19: a finalized outcome never changes: a late write of an older generation is refused."""
    await running(store)
    at = T0 + timedelta(minutes=10)
    action = Action(tool="send_mail", whom="board@example.com", what="sent the summary", at=at)
    assert await store.write_state(
        "anna",
        "h1",
        1,
        3,
        state=RowState.UNREPORTED,
        outcome_kind=OutcomeKind.PARTIAL,
        summary="Half of the report.",
        actions=[action],
        steps=12,
        work_tokens=34_000,
        input_tokens=90_000,
        finished_at=at,
    )
    final = await store.get("anna", "h1")
    assert final is not None
    assert final.actions == [action] and final.outcome_kind is OutcomeKind.PARTIAL and final.steps == 12
    stale = await store.write_state("anna", "h1", 1, 2, state=RowState.RUNNING, steps=99, keep_until=None)
    assert stale is False
    assert await store.get("anna", "h1") == final


async def test_write_state_refuses_another_admission(store: HelperStore) -> None:
    """R19: a write carrying another seq (an old admission of a reused id) changes nothing."""
    assert await store.insert_admitted(row(seq=5))
    assert await store.write_state("anna", "h1", 4, 9, state=RowState.CLOSED) is False
    assert await store.write_state("anna", "h1", 6, 9, state=RowState.CLOSED) is False
    assert await store.get("anna", "h1") == row(seq=5)


async def test_write_state_on_a_missing_row_applies_nothing(store: HelperStore) -> None:
    """R19, R29: a write for a removed row reports that it did not apply."""
    assert await store.write_state("anna", "gone", 1, 2, state=RowState.CLOSED) is False
    assert await rows_of(store, "anna") == []


async def test_write_state_refuses_columns_that_are_not_writable(store: HelperStore) -> None:
    """R19: what an admission fixed (task, boundary, limits, result directory, admission time) never changes."""
    assert await store.insert_admitted(row())
    for column in ("task", "boundary", "limits", "result_dir", "admitted_at", "goal_id", "nonsense"):
        with pytest.raises(ValueError, match="not writable"):
            untyped: Any = store.write_state  # what an untyped caller could do
            await untyped("anna", "h1", 1, 2, **{column: "x"})
    assert await store.get("anna", "h1") == row()


async def test_write_state_other_owner_is_untouched(store: HelperStore) -> None:
    """R34: a write names its owner; another owner's row with the same helper id is not changed."""
    assert await store.insert_admitted(row(owner="anna"))
    assert await store.insert_admitted(row(owner="boris"))
    assert await store.write_state("anna", "h1", 1, 2, state=RowState.CLOSED)
    assert await store.get("boris", "h1") == row(owner="boris")


# --- write_progress (R11) ---------------------------------------------------------------------------------


async def test_write_progress_applies_only_at_the_running_generation(store: HelperStore) -> None:
    """R11, R19: progress is written only at exactly the generation of the running row."""
    await running(store)
    usage = Usage(steps=3, work_tokens=4_200, input_tokens=9_000)
    assert await store.write_progress("anna", "h1", 1, 2, usage, "first findings")
    got = await store.get("anna", "h1")
    assert got is not None
    assert (got.steps, got.work_tokens, got.input_tokens, got.last_message) == (3, 4_200, 9_000, "first findings")
    assert got.generation == 2
    later = Usage(steps=4, work_tokens=5_000, input_tokens=12_000)
    assert await store.write_progress("anna", "h1", 1, 1, later, "older writer") is False
    assert await store.write_progress("anna", "h1", 1, 3, later, "newer generation") is False
    assert await store.write_progress("anna", "h1", 2, 2, later, "another admission") is False
    assert await store.write_progress("anna", "h1", 1, 2, later, None)
    got = await store.get("anna", "h1")
    assert got is not None and got.steps == 4 and got.last_message == "first findings", "None keeps the message"


async def test_write_progress_never_takes_steps_or_work_back(store: HelperStore) -> None:
    """R11, R46: an older read written after a newer one (two follows of one helper) changes nothing; the same
    counts with a newer message are written."""
    await running(store)
    assert await store.write_progress("anna", "h1", 1, 2, Usage(steps=5, work_tokens=900), "five")
    assert await store.write_progress("anna", "h1", 1, 2, Usage(steps=4, work_tokens=800), "four") is False
    assert await store.write_progress("anna", "h1", 1, 2, Usage(steps=5, work_tokens=700), "less work") is False
    got = await store.get("anna", "h1")
    assert got is not None and (got.steps, got.work_tokens, got.last_message) == (5, 900, "five")
    assert await store.write_progress("anna", "h1", 1, 2, Usage(steps=5, work_tokens=900), "five, said better")
    got = await store.get("anna", "h1")
    assert got is not None and got.last_message == "five, said better"


async def test_write_progress_never_touches_a_row_that_is_not_running(store: HelperStore) -> None:
    """R19, R21: after a close or a finalization at the same generation, progress is refused."""
    await running(store)
    assert await store.write_state("anna", "h1", 1, 2, state=RowState.CLOSED)
    closed = await store.get("anna", "h1")
    assert await store.write_progress("anna", "h1", 1, 2, Usage(steps=9), "late") is False
    assert await store.get("anna", "h1") == closed
    assert await store.insert_admitted(row("h2"))  # waiting, generation 1
    assert await store.write_progress("anna", "h2", 1, 1, Usage(steps=1), "not started") is False


# --- the follows' replicas (R46) ---------------------------------------------------------------------------


async def test_each_follow_attempt_names_its_replica_and_the_first_start_is_kept(store: HelperStore) -> None:
    """R46: the row names the replica whose attempt runs now; the moment a worker began following stays the first.
    A running helper whose row names no live replica (none yet, or one whose record is gone) is among those a
    survivor checks with the server when a replica dies."""
    await running(store)
    assert await store.follows_without_live_replica() == [("anna", "h1", None)], "no attempt recorded yet"
    await store.beat_replica("111@a")
    assert await store.record_follow_replica("anna", "h1", 1, 2, "111@a", starts_following=True)
    first = await store.get("anna", "h1")
    assert first is not None and first.follow_started_at is not None
    assert await store.follows_without_live_replica() == [], "its replica is alive"
    assert await store.record_follow_replica("anna", "h1", 1, 2, "222@b", starts_following=True)
    again = await store.get("anna", "h1")
    assert again is not None and again.follow_started_at == first.follow_started_at
    assert await store.follows_without_live_replica() == [("anna", "h1", "222@b")], "222@b has no record"
    await store.beat_replica("222@b")
    assert await store.follows_without_live_replica() == []
    assert await store.record_follow_replica("anna", "h1", 1, 1, "333@c", starts_following=False) is False, (
        "older writer"
    )
    await store.forget_replica("222@b")
    assert await store.write_state("anna", "h1", 1, 2, state=RowState.CLOSED)
    assert await store.follows_without_live_replica() == [], "only running helpers have a follow to start again"


async def test_a_silent_replica_is_taken_by_one_caller_and_a_stopped_one_by_none(store: HelperStore) -> None:
    """R46: a replica silent since a moment is handed to exactly one caller; one that beat since is not; one that
    stopped by itself (its record forgotten) is nobody's."""
    await store.beat_replica("111@a")
    await store.beat_replica("222@b")
    await store.beat_replica("222@b")  # a second beat updates the same record
    later = datetime.now(UTC) + timedelta(seconds=1)
    assert await store.claim_silent_replicas(later, besides="222@b") == ["111@a"]
    assert await store.claim_silent_replicas(later, besides="222@b") == [], "taken once"
    assert await store.claim_silent_replicas(datetime.now(UTC) - timedelta(minutes=1), besides="333@c") == []
    await store.forget_replica("222@b")
    assert await store.claim_silent_replicas(later, besides="333@c") == []


# --- removal, queue position, usage, events, parked sessions ---------------------------------------------


async def test_remove_rows_returns_the_result_directories(store: HelperStore) -> None:
    """R3, R23, R29: removing rows returns the directories they pointed at, for this owner only."""
    for helper_id, seq in (("h1", 1), ("h2", 2), ("h3", 3)):
        assert await store.insert_admitted(row(helper_id, seq))
    assert await store.insert_admitted(row("h1", 7, owner="boris"))
    directories = await store.remove_rows("anna", ["h1", "h3", "never-was"])
    assert sorted(directories) == ["/results/anna/h1.1", "/results/anna/h3.3"]
    assert [r.helper_id for r in await rows_of(store, "anna")] == ["h2"]
    assert await store.get("boris", "h1") == row("h1", 7, owner="boris")
    assert await store.remove_rows("anna", []) == []
    assert await store.remove_rows("anna", ["h1"]) == [], "removing twice is harmless"


async def test_removing_an_admission_leaves_a_row_another_admission_wrote(store: HelperStore) -> None:
    """R5, R29: after a lost admission the same id holds that admission's row (seq 8); cleaning up a later one
    (seq 9) must not delete it, or the lost admission's helper and the next would both run (found by the soak)."""
    assert await store.insert_admitted(row("h1", 8))
    assert await store.remove_rows("anna", ["h1"], {"h1": 9}) == []
    assert (await store.get("anna", "h1")) == row("h1", 8)
    assert await store.remove_rows("anna", ["h1"], {"h1": 8}) == ["/results/anna/h1.8"]
    assert await store.get("anna", "h1") is None


async def test_result_dirs_lists_every_row(store: HelperStore) -> None:
    """R29: the orphan sweep knows every directory a row points at."""
    assert await store.result_dirs() == set()
    assert await store.insert_admitted(row("h1", 1))
    assert await store.insert_admitted(row("h2", 2, owner="boris"))
    assert await store.result_dirs() == {"/results/anna/h1.1", "/results/boris/h2.2"}


async def test_the_worker_counts_rows_by_state_and_reads_each_running_hard_ceiling(store: HelperStore) -> None:
    """R15, R35: the gauges' reads: rows of every owner by state, and the hard ceiling of each running helper
    whose session opened (its deadline plus its own grace; one still opening has none yet)."""
    assert await store.count_by_state() == {}
    await running(store, "h1", 1)
    assert await store.insert_admitted(row("h2", 2, limits=Limits(deadline_ms=600_000, grace_ms=30_000)))
    assert await store.write_state("anna", "h2", 2, 2, state=RowState.RUNNING, started_at=T0, deadline_at=T0)
    assert await store.insert_admitted(row("opening", 3))
    assert await store.write_state("anna", "opening", 3, 2, state=RowState.RUNNING, started_at=T0)
    assert await store.insert_admitted(row("h4", 4, owner="boris"))
    assert await store.count_by_state() == {"running": 3, "waiting": 1}
    ceilings = sorted(await store.running_hard_ceilings())
    assert ceilings == [
        T0 + timedelta(seconds=30),
        T0 + timedelta(minutes=45) + timedelta(milliseconds=Limits().grace_ms),
    ]
    assert all(ceiling.tzinfo is not None for ceiling in ceilings)


async def finish(store: HelperStore, started: HelperRow, kind: OutcomeKind, usage: Usage, at: datetime) -> None:
    """The finalizer's write of an outcome at generation 3, which records the usage line with it."""
    await store.write_outcome(started, 3, usage, state=RowState.UNREPORTED, outcome_kind=kind, finished_at=at)


async def test_ahead_counts_waiting_rows_admitted_earlier(store: HelperStore) -> None:
    """R4, R6: a waiting helper's place: waiting rows of the same owner with a smaller seq."""
    assert await store.insert_admitted(row("r1", 1, state=RowState.RUNNING))
    for helper_id, seq in (("w2", 2), ("w3", 3), ("w5", 5)):
        assert await store.insert_admitted(row(helper_id, seq))
    assert await store.insert_admitted(row("u4", 4, state=RowState.UNREPORTED))
    assert await store.insert_admitted(row("other", 1, owner="boris"))
    assert await store.reads.ahead("anna", 1) == 0
    assert await store.reads.ahead("anna", 2) == 0
    assert await store.reads.ahead("anna", 3) == 1
    assert await store.reads.ahead("anna", 5) == 2
    assert await store.reads.ahead("anna", 6) == 3
    assert await store.reads.ahead("boris", 9) == 1


async def test_usage_is_recorded_once_per_admission(store: HelperStore) -> None:
    """R31: usage records the model and counters once per admission, even when finalization is retried."""
    started = await running(store)
    first = Usage(steps=12, work_tokens=34_000, input_tokens=90_000)
    finished = T0 + timedelta(minutes=20)
    await finish(store, started, OutcomeKind.COMPLETED, first, finished)
    await finish(store, started, OutcomeKind.FAILED, Usage(steps=99), finished + timedelta(minutes=1))
    recorded = await store.reads.usage("anna")
    assert len(recorded) == 1
    usage = recorded[0]
    assert (usage.helper_id, usage.seq, usage.model, usage.outcome_kind) == (
        "h1",
        1,
        "gpt-large",
        "completed",
    )
    assert (usage.steps, usage.work_tokens, usage.input_tokens) == (12, 34_000, 90_000)
    # A later admission of the same helper id (after retention) is its own usage record.
    await store.remove_rows("anna", ["h1"])
    again = row("h1", seq=8, goal_id="weekly")
    assert await store.insert_admitted(again)
    await finish(store, again, OutcomeKind.PARTIAL, first, finished)
    assert [(u.seq, u.goal_id) for u in await store.reads.usage("anna")] == [(1, None), (8, "weekly")]
    assert await store.reads.usage("boris") == []


async def test_starting_a_row_answers_with_the_row_as_written(store: HelperStore) -> None:
    """R7, R9: the open marks the admission's row running and gets it back in one statement; a stale
    generation or another admission's row is not written and answers None."""
    assert await store.insert_admitted(row("h1", 4))
    started = await store.start_running("anna", "h1", 4, 2, T0, T0 + timedelta(minutes=45))
    assert started is not None
    assert (started.state, started.generation, started.started_at, started.task) == (
        RowState.RUNNING,
        2,
        T0,
        row("h1", 4).task,
    )
    assert started == await store.get("anna", "h1")
    assert await store.write_state("anna", "h1", 4, 3, session_id="s-1")
    assert await store.start_running("anna", "h1", 4, 2, T0, T0) is None  # a newer generation wrote it
    assert await store.start_running("anna", "h1", 5, 9, T0, T0) is None  # not this admission
    assert await store.start_running("anna", "gone", 1, 2, T0, T0) is None


async def test_the_outcome_and_its_usage_line_are_written_together_once(store: HelperStore) -> None:
    """R19, R31: the finalizer's row write and its usage line are one transaction: a retried finalization
    rewrites the row and adds no second line; a stale one (an older generation) writes neither."""
    started = await running(store)
    usage = Usage(steps=3, work_tokens=300, input_tokens=1_200)
    finished = T0 + timedelta(minutes=5)
    outcome: dict[str, Any] = {"state": RowState.UNREPORTED, "outcome_kind": OutcomeKind.COMPLETED}
    assert await store.write_outcome(started, 3, usage, finished_at=finished, summary="done", **outcome)
    assert await store.write_outcome(started, 3, usage, finished_at=finished, summary="done again", **outcome)
    assert not await store.write_outcome(started, 2, Usage(steps=99), finished_at=finished, summary="old", **outcome)
    stored = await store.get("anna", "h1")
    assert stored is not None and (stored.summary, stored.outcome_kind) == ("done again", OutcomeKind.COMPLETED)
    lines = await store.reads.usage("anna")
    assert [(u.helper_id, u.steps, u.outcome_kind) for u in lines] == [("h1", 3, "completed")]
    with pytest.raises(ValueError, match="outcome_kind and finished_at"):
        await store.write_outcome(started, 4, usage, state=RowState.UNREPORTED)


async def test_record_event_upserts_by_key(store: HelperStore) -> None:
    """R26: one record per event key, updated as delivery goes pending -> attempting -> delivered."""
    common: dict[str, Any] = {"owner": "anna", "key": "helpers-ready:anna:1", "helper_ids": ["h1", "h2"]}
    await store.record_event(**common, state="pending", attempts=0, receipt_id=None, last_error=None)
    await store.record_event(**common, state="failed", attempts=1, receipt_id=None, last_error="chat busy")
    await store.record_event(**common, state="delivered", attempts=2, receipt_id="r-9", last_error=None)
    await store.record_event(
        owner="anna", key="helpers-ready:anna:2", helper_ids=["h3"], state="pending", attempts=0, receipt_id=None,
        last_error=None,
    )  # fmt: skip
    events = {e.key: e for e in await chat_events(store, "anna")}
    assert set(events) == {"helpers-ready:anna:1", "helpers-ready:anna:2"}
    first = events["helpers-ready:anna:1"]
    assert (first.state, first.attempts, first.receipt_id, first.last_error) == (
        "delivered",
        2,
        "r-9",
        None,
    )
    assert first.helper_ids == ["h1", "h2"]
    assert await chat_events(store, "boris") == []


async def test_an_event_still_offered_is_found_by_its_owner_its_state_and_its_last_change(store: HelperStore) -> None:
    """R26: what the chat's idle notice asks the store: whether one of the owner's events is still offered (in an
    offered-again state, changed lately). A delivered one, another owner's, or one unchanged since the moment asked
    about (given up long ago) is not."""
    offered_again = ["pending", "attempting", "failed", "uncertain"]
    before = datetime.now(UTC) - timedelta(seconds=1)
    fields: dict[str, Any] = {"attempts": 1, "receipt_id": None, "last_error": None}
    await store.record_event(owner="anna", key="k1", helper_ids=["h1"], state="delivered", **fields)
    await store.record_event(owner="boris", key="k2", helper_ids=["h2"], state="pending", **fields)
    assert not await store.reads.event_offered_since("anna", offered_again, before)
    await store.record_event(owner="anna", key="k3", helper_ids=["h3"], state="failed", **fields)
    assert await store.reads.event_offered_since("anna", offered_again, before)
    assert not await store.reads.event_offered_since("anna", offered_again, datetime.now(UTC) + timedelta(seconds=1))
    assert not await store.reads.event_offered_since("anna", ["pending"], before)


async def test_record_parked_keeps_one_record_per_session(store: HelperStore) -> None:
    """R20: a session whose reset failed is parked; parking it again updates the record."""
    await store.record_parked("anna", "h1", "s-1", "reset timed out")
    await store.record_parked("anna", "h1", "s-1", "reset refused")
    await store.record_parked("anna", "h2", "s-2", "core down")
    await store.record_parked("boris", "h9", "s-9", "core down")
    parked = {p.session_id: p for p in await parked_of(store, "anna")}
    assert set(parked) == {"s-1", "s-2"}
    assert parked["s-1"].error == "reset refused" and parked["s-1"].helper_id == "h1"


# --- reads (R27, R34) ---------------------------------------------------------------------------------------


async def test_rows_filter_by_state_in_admission_order(store: HelperStore) -> None:
    """R27: the unreported list (and any state filter) comes straight from the store, in admission order."""
    states = [RowState.UNREPORTED, RowState.RUNNING, RowState.UNREPORTED, RowState.DELIVERED, RowState.CLOSED]
    for seq, state in zip([5, 1, 3, 2, 4], states, strict=True):
        assert await store.insert_admitted(row(f"h{seq}", seq, state=state))
    assert [r.helper_id for r in await rows_of(store, "anna")] == ["h1", "h2", "h3", "h4", "h5"]
    assert [r.helper_id for r in await rows_of(store, "anna", [RowState.UNREPORTED])] == ["h3", "h5"]
    both = await rows_of(store, "anna", [RowState.DELIVERED, RowState.CLOSED])
    assert [r.helper_id for r in both] == ["h2", "h4"]
    assert await rows_of(store, "anna", []) == []
    assert await rows_of(store, "anna", [RowState.WAITING]) == []


async def test_one_owner_never_sees_another_owners_rows(store: HelperStore) -> None:
    """R34: reads are per owner: another owner's rows, even with the same helper id, are invisible."""
    assert await store.insert_admitted(row("shared", 1, owner="anna", task="anna's task"))
    assert await store.insert_admitted(row("shared", 1, owner="boris", task="boris's task"))
    assert await store.insert_admitted(row("secret", 2, owner="boris", state=RowState.UNREPORTED))
    anna = await rows_of(store, "anna")
    assert [(r.owner, r.helper_id, r.task) for r in anna] == [("anna", "shared", "anna's task")]
    assert await rows_of(store, "anna", [RowState.UNREPORTED]) == []
    assert await store.get("anna", "secret") is None
    boris = await store.get("boris", "shared")
    assert boris is not None and boris.task == "boris's task"


async def test_datetimes_come_back_timezone_aware(store: HelperStore) -> None:
    """R18, R29: every moment of a row comes back aware and equal to what was written."""
    await running(store)
    finished = T0 + timedelta(minutes=30)
    assert await store.write_state(
        "anna",
        "h1",
        1,
        3,
        state=RowState.DELIVERED,
        finished_at=finished,
        delivered_at=finished + timedelta(minutes=1),
        keep_until=finished + timedelta(days=1),
    )
    got = await store.get("anna", "h1")
    assert got is not None
    for name in DATETIME_FIELDS:
        moment = getattr(got, name)
        assert moment is not None and moment.tzinfo is not None and moment.utcoffset() is not None, name
    assert (got.admitted_at, got.started_at, got.finished_at) == (T0, T0, finished)
    assert got.delivered_at == finished + timedelta(minutes=1) and got.keep_until == finished + timedelta(days=1)
    assert got.updated_at > T0


async def test_a_moment_in_another_time_zone_keeps_its_instant(
    store: HelperStore, request: pytest.FixtureRequest
) -> None:
    """R29: a moment written with a non-UTC offset is the same instant when read back (retention relies on it)."""
    moscow = timezone(timedelta(hours=3))
    admitted = datetime(2026, 3, 1, 12, 0, tzinfo=moscow)  # 09:00 UTC
    assert await store.insert_admitted(row(admitted_at=admitted, updated_at=admitted))
    assert await store.write_state("anna", "h1", 1, 2, keep_until=admitted + timedelta(days=1))
    got = await store.get("anna", "h1")
    assert got is not None
    assert got.admitted_at == admitted
    assert got.keep_until == admitted + timedelta(days=1)


async def test_usage_event_and_parked_moments_are_aware(store: HelperStore, request: pytest.FixtureRequest) -> None:
    """R31: the usage, event and parked records carry aware moments, like the rows."""
    started = await running(store)
    await finish(store, started, OutcomeKind.COMPLETED, Usage(steps=1), T0 + timedelta(minutes=5))
    await store.record_event(
        owner="anna", key="k", helper_ids=["h1"], state="pending", attempts=0, receipt_id=None, last_error=None
    )
    await store.record_parked("anna", "h1", "s-h1", "reset failed")
    moments = [
        (await store.reads.usage("anna"))[0].finished_at,
        (await store.reads.usage("anna"))[0].started_at,
        (await chat_events(store, "anna"))[0].updated_at,
        (await parked_of(store, "anna"))[0].parked_at,
    ]
    assert all(isinstance(m, datetime) and m.tzinfo is not None for m in moments), moments
    assert moments[0] == T0 + timedelta(minutes=5)


async def test_a_question_outcome_keeps_its_choices_and_any_other_keeps_none(store: HelperStore) -> None:
    """R49: the finalizer's write keeps a question's choices in the row, read back equal (labels in any script);
    an outcome without them stores SQL NULL, not a JSON null."""
    choices = QuestionChoices(
        question_id="venue",
        options=[QuestionOption(id="hall-a", label="Зал «А»"), QuestionOption(id="roof", label="The roof")],
        free_text=True,
    )
    asked = await running(store, "asked")
    plain = await running(store, "plain")
    finished = T0 + timedelta(minutes=5)
    for written, offered in ((asked, choices), (plain, None)):
        outcome: RowChanges = {
            "state": RowState.UNREPORTED,
            "outcome_kind": OutcomeKind.QUESTION,
            "finished_at": finished,
            "choices": offered,
        }
        assert await store.write_outcome(written, 3, Usage(), **outcome)
    stored = await store.get("anna", "asked")
    assert stored is not None and stored.choices == choices
    assert [view.choices for view in await store.reads.views("anna")] == [choices, None]
    async with store.engine.connect() as connection:
        nulls = await connection.execute(text("SELECT helper_id FROM helper_rows WHERE choices IS NULL"))
        assert [name for (name,) in nulls] == ["plain"]


def _downgrade(connection: Connection, revision: str) -> None:
    from alembic import command

    from store.database import _config

    config = _config()
    config.attributes["connection"] = connection
    command.downgrade(config, revision)


def _columns(connection: Connection) -> list[str]:
    return [column["name"] for column in inspect(connection).get_columns("helper_rows")]


async def test_the_choices_migration_goes_down_and_up_again_keeping_the_rows(store: HelperStore) -> None:
    """Migration 0005 adds the nullable choices column; its downgrade drops only that column, rows intact, and the
    upgrade adds it again."""
    await running(store, "h1")
    async with store.engine.begin() as connection:
        await connection.run_sync(_downgrade, "0004")
        assert "choices" not in await connection.run_sync(_columns)
        assert (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalar() == "0004"
        assert (await connection.execute(text("SELECT helper_id FROM helper_rows"))).scalars().all() == ["h1"]
    await migrate(store.engine)
    async with store.engine.connect() as connection:
        assert "choices" in await connection.run_sync(_columns)
    shown = await store.get("anna", "h1")
    assert shown is not None and shown.choices is None and shown.state is RowState.RUNNING


async def test_the_follow_replica_migration_only_adds_and_leaves_followed_by_alone(store: HelperStore) -> None:
    """Migration 0007 adds `follow_replica` and keeps `followed_by`, which 1.3.0 workers write during a rollout:
    what they wrote there stays, this code neither reads nor writes it, and the downgrade drops only the new
    column."""
    await running(store, "h1")
    async with store.engine.begin() as connection:
        await connection.run_sync(_downgrade, "0006")
        names = await connection.run_sync(_columns)
        assert "followed_by" in names and "follow_replica" not in names
        await connection.execute(text("UPDATE helper_rows SET followed_by = '111@a' WHERE helper_id = 'h1'"))
    await migrate(store.engine)
    async with store.engine.connect() as connection:
        assert {"followed_by", "follow_replica"} <= set(await connection.run_sync(_columns))
    assert await store.follows_without_live_replica() == [("anna", "h1", None)], "the old column is not read"
    assert await store.record_follow_replica("anna", "h1", 1, 2, "222@b", starts_following=True)
    assert await store.follows_without_live_replica() == [("anna", "h1", "222@b")]
    # A 1.3.0 worker goes on writing the old column beside this code, and neither write touches the other's.
    async with store.engine.begin() as connection:
        await connection.execute(text("UPDATE helper_rows SET followed_by = '333@c' WHERE helper_id = 'h1'"))
        both = await connection.execute(text("SELECT followed_by, follow_replica FROM helper_rows"))
        assert both.all() == [("333@c", "222@b")]
    assert await store.follows_without_live_replica() == [("anna", "h1", "222@b")]
