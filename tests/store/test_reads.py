"""R43: the reads of `store/reads.py` answer the same on every driver that runs them, on SQLite and on PostgreSQL:
rows written through `HelperStore` read back equal through its engine and through the starter's bare drivers
(stdlib sqlite3, asyncpg), the schema check refuses and accepts the same revisions, and the read commands print the
same answers on both paths.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import Table, text

from config.store_address import StoreAddress
from contracts.core_api import Action, QuestionChoices, QuestionOption
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, HelperView, RowState
from domain.work import Usage
from store.database import SchemaNotCurrent
from store.helper_store import HelperStore, RowChanges, row_table
from store.reads import (
    HELPER_ROW_COLUMNS,
    RUNTIME_ONLY_COLUMNS,
    USAGE_COLUMNS,
    VIEW_COLUMNS,
    Query,
    RowReader,
    open_bare,
)
from store.revisions import REVISIONS
from store.schema import UsageRecord
from tests.conftest import POSTGRES_URL
from tests.helpers import fresh_postgres_database, rows_of
from tests.store.test_helper_store import row

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 1, 9, 0, 0, 123456, tzinfo=UTC)
CHOICES = QuestionChoices(
    question_id="venue",
    options=[QuestionOption(id="hall-a", label="Зал «А», 40 мест"), QuestionOption(id="roof", label="The roof")],
    free_text=False,
)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A migrated store's URL: a fresh SQLite file, or a fresh PostgreSQL database."""
    async with contextlib.AsyncExitStack() as scope:
        if request.param == "sqlite":
            url = f"sqlite+aiosqlite:///{tmp_path / 'helpers.sqlite3'}"
        else:
            url = await scope.enter_async_context(fresh_postgres_database(POSTGRES_URL))
        store = await HelperStore.connect(url, run_migrations=True)
        await store.close()
        yield url


@contextlib.asynccontextmanager
async def both(url: str) -> AsyncIterator[tuple[HelperStore, RowReader]]:
    store = await HelperStore.connect(url)
    reader = await open_bare(StoreAddress.parse(url))
    try:
        yield store, reader
    finally:
        await reader.close()
        await store.close()


async def _fill(store: HelperStore) -> None:
    """Rows in every state and shape a read meets: outcomes with actions, Goals, moments with and without micros."""
    action = Action(tool="send_mail", whom="bob@example.com", what="sent the Q3 report", at=T0)
    for number, state in enumerate(RowState, start=1):
        for owner in ("anna", "boris"):
            await store.insert_admitted(row(f"h{number}", seq=number, state=RowState.WAITING, owner=owner))
            if state is RowState.WAITING:
                continue
            changes: RowChanges = {
                "state": state,
                "session_id": f"s-{number}",
                "steps": number,
                "work_tokens": 1_000 * number,
                "input_tokens": 7,
                "last_message": "the last message\nwith two lines",
                "started_at": T0 + timedelta(minutes=1),
                "deadline_at": T0.astimezone(timezone(timedelta(hours=3))) + timedelta(minutes=46),
            }
            if state in (RowState.UNREPORTED, RowState.DELIVERED, RowState.CLOSED, RowState.EXPIRED):
                changes["outcome_kind"] = OutcomeKind.COMPLETED
                changes["summary"] = "Mailed the report. «ok»"
                changes["actions"] = [action]
                changes["finished_at"] = T0 + timedelta(minutes=5)
                changes["keep_until"] = T0 + timedelta(days=7)
            assert await store.write_state(owner, f"h{number}", number, 2, **changes)
    await store.insert_admitted(row("g1", seq=9, state=RowState.WAITING, goal_id="inbox", admitted_at=T0))
    # Usage lines as the finalizer writes them: one of a started helper, one of a Goal's helper that never started.
    finished_row = await store.get("anna", "h3")
    assert finished_row is not None
    usage = Usage(steps=3, work_tokens=30, input_tokens=4)
    outcome: RowChanges = {"state": RowState.UNREPORTED, "outcome_kind": OutcomeKind.COMPLETED, "finished_at": T0}
    assert await store.write_outcome(finished_row, 3, usage, **outcome)
    goal_row = row("g2", seq=10, state=RowState.WAITING, goal_id="inbox", admitted_at=T0 + timedelta(seconds=1))
    await store.insert_admitted(goal_row)
    failed: RowChanges = {**outcome, "outcome_kind": OutcomeKind.FAILED, "finished_at": T0 + timedelta(hours=1)}
    assert await store.write_outcome(goal_row, 2, Usage(), **failed)
    # A question outcome with choices (R49), as the finalizer writes it.
    question_row = row("q1", seq=11, state=RowState.RUNNING, admitted_at=T0 + timedelta(seconds=2))
    await store.insert_admitted(question_row)
    asked: RowChanges = {**outcome, "outcome_kind": OutcomeKind.QUESTION, "summary": "Which venue?", "choices": CHOICES}
    assert await store.write_outcome(question_row, 2, Usage(), **asked)


async def test_the_bare_reads_answer_what_the_store_answers(store_url: str) -> None:
    """R43: every read of the starter, through the bare driver, equals `HelperStore`'s on the same rows."""
    async with both(store_url) as (store, reader):
        await _fill(store)
        for owner in ("anna", "boris", "nobody"):
            for some in (None, [RowState.UNREPORTED], [RowState.WAITING, RowState.RUNNING], []):
                views = await reader.views(owner, some)
                assert views == await store.reads.views(owner, some) == _views_of(await rows_of(store, owner, some))
            for helper_id in ("h1", "h3", "g1", "missing"):
                assert await reader.get(owner, helper_id) == await store.get(owner, helper_id)
            for seq in (1, 9, 10):
                assert await reader.ahead(owner, seq) == await store.reads.ahead(owner, seq)
            assert await reader.usage(owner) == await store.reads.usage(owner)
        listed = await reader.views("anna")
        assert [v.helper_id for v in listed] == ["h1", "h2", "h3", "h4", "h5", "h6", "g1", "g2", "q1"]
        assert all(v.admitted_at.tzinfo is not None for v in listed)
        assert {view.helper_id: view.ahead for view in listed} == {
            "h1": 0,
            "h2": None,
            "h3": None,
            "h4": None,
            "h5": None,
            "h6": None,
            "g1": 1,
            "g2": None,
            "q1": None,
        }
        unreported = await reader.views("anna", [RowState.UNREPORTED])
        assert unreported[0].actions[0].whom == "bob@example.com" and unreported[0].finished_at == T0
        shown = await reader.get("anna", "h3")
        assert shown is not None and shown.limits == row().limits and shown.boundary == row().boundary
        assert shown.choices is None and [v.choices for v in listed if v.choices] == [CHOICES]
        asked = await reader.get("anna", "q1")
        assert asked is not None and asked.choices == CHOICES
        lines = await reader.usage("anna")
        assert [(u.helper_id, u.goal_id, u.outcome_kind, u.steps) for u in lines] == [
            ("h3", None, "completed", 3),
            ("g2", "inbox", "failed", 0),
            ("q1", None, "question", 0),
        ]
        assert lines[0].started_at == T0 + timedelta(minutes=1) and lines[1].started_at is None


def _views_of(rows: list[HelperRow]) -> list[HelperView]:
    """What a listing showed when it read whole rows: each row's public part, a waiting one with its place."""
    waiting = [r.seq for r in rows if r.state is RowState.WAITING]
    return [
        HelperView.model_validate(
            {
                **row.model_dump(exclude={"last_message", "session_id"}),
                "ahead": sum(1 for s in waiting if s < row.seq) if row.state is RowState.WAITING else None,
            }
        )
        for row in rows
    ]


async def test_the_bare_schema_check_is_the_stores(store_url: str) -> None:
    """R43: a schema behind this code is refused naming both revisions, a newer release's is accepted, a store
    never migrated is "at nothing": the same rule (`store.revisions.check_revision`) as `check_schema`."""
    address = StoreAddress.parse(store_url)
    store = await HelperStore.connect(address)
    try:
        for version, refused in (("0001", f"at 0001, this code needs {REVISIONS[-1]}"), ("0099_newer", None)):
            async with store.engine.begin() as connection:
                await connection.execute(text(f"UPDATE alembic_version SET version_num = '{version}'"))
            if refused:
                with pytest.raises(SchemaNotCurrent, match=refused):
                    await open_bare(address)
            else:
                await (await open_bare(address)).close()
        async with store.engine.begin() as connection:
            await connection.execute(text("DROP TABLE alembic_version"))
        with pytest.raises(SchemaNotCurrent, match=f"at nothing, this code needs {REVISIONS[-1]}"):
            await open_bare(address)
    finally:
        await store.close()


def test_the_bare_columns_are_the_tables() -> None:
    """R43: the bare reads select every column `HelperStore` decodes, and only those."""
    mapped = [column.name for column in row_table.columns if column.name not in RUNTIME_ONLY_COLUMNS]
    assert list(HELPER_ROW_COLUMNS) == mapped
    assert list(USAGE_COLUMNS) == [column.name for column in cast(Table, UsageRecord.__table__).columns]
    assert set(HELPER_ROW_COLUMNS) == set(HelperRow.model_fields)
    # A listing reads what a view shows, and seq for the places in the queue; `show` adds the rest of the row's.
    shown = set(HelperView.model_fields) - {"ahead", "last_message", "full_text", "session_id"}
    assert set(VIEW_COLUMNS) == shown | {"seq"} and set(VIEW_COLUMNS) <= set(mapped)


@pytest.mark.postgres
async def test_the_bare_reads_on_postgresql_never_plan_parallel_workers() -> None:
    """R43: an owner's few rows are never worth parallel workers, which a planner without column statistics (a
    restored dump, a table just loaded) would start for every `list`: the reader's connection turns them off."""
    async with fresh_postgres_database(POSTGRES_URL) as url:
        store = await HelperStore.connect(url, run_migrations=True)
        await store.close()
        reader = await open_bare(StoreAddress.parse(url))
        try:
            setting = await reader.fetch(Query("SHOW max_parallel_workers_per_gather"))
            assert setting == [{"max_parallel_workers_per_gather": "0"}]
        finally:
            await reader.close()


def _starter(argv: list[str], store_url: str, results: Path) -> tuple[int, str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))},
        "HELPER_STORE_URL": store_url,
        "HELPER_RESULTS_DIR": str(results),
    }
    done = subprocess.run(
        [sys.executable, "-m", "starter", *argv], cwd=ROOT, env=env, capture_output=True, timeout=60, check=False
    )
    return done.returncode, done.stdout.decode()


def _through_sqlalchemy(url: str) -> str:
    """The same store behind a URL no bare reader takes (a harmless query), so `HelperStore` reads it."""
    return url + ("?timeout=30" if url.startswith("sqlite") else "?prepared_statement_cache_size=100")


async def test_the_read_commands_print_the_same_answers_on_both_paths(store_url: str, tmp_path: Path) -> None:
    """R43: `list`, `show`, `unreported` and `usage` print the same JSON, with the same exit codes, through the bare
    driver as through SQLAlchemy; so do a store behind this code's schema and one never migrated."""
    store = await HelperStore.connect(store_url)
    try:
        await _fill(store)
    finally:
        await store.close()
    outcome = tmp_path / "results" / "outcome"
    outcome.mkdir(parents=True)
    commands = [
        ["list", "--owner", "anna"],
        ["list", "--owner", "anna", "--state", "waiting", "--state", "unreported"],
        ["unreported", "--owner", "boris"],
        ["show", "--owner", "anna", "--id", "h1"],
        ["show", "--owner", "anna", "--id", "h3"],
        ["show", "--owner", "anna", "--id", "q1"],
        ["show", "--owner", "anna", "--id", "missing"],
        ["usage", "--owner", "anna"],
    ]

    def compare() -> None:
        for argv in commands:
            bare = _starter(argv, store_url, tmp_path / "results")
            assert bare == _starter(argv, _through_sqlalchemy(store_url), tmp_path / "results"), argv

    compare()
    assert _starter(commands[0], store_url, tmp_path / "results")[0] == 0
    store = await HelperStore.connect(store_url)
    try:
        async with store.engine.begin() as connection:
            await connection.execute(text("UPDATE alembic_version SET version_num = '0001'"))
    finally:
        await store.close()
    compare()
    assert _starter(commands[0], store_url, tmp_path / "results")[0] == 3
    if store_url.startswith("sqlite"):
        (tmp_path / "garbage.sqlite3").write_bytes(b"not a database at all " * 100)
        (tmp_path / "a-file").write_text("a file where a folder should be")
        for broken in ("nowhere/helpers.sqlite3", "garbage.sqlite3", "a-file/helpers.sqlite3"):
            url = f"sqlite+aiosqlite:///{tmp_path / broken}"
            assert _starter(commands[0], url, tmp_path)[0] == 3
            assert _starter(commands[0], url, tmp_path) == _starter(commands[0], _through_sqlalchemy(url), tmp_path)


async def test_the_read_commands_print_a_questions_choices(store_url: str, tmp_path: Path) -> None:
    """R49: `show`, `list` and `unreported` print a question outcome's choices as one object (its id, the options
    with their ids and labels, the free-text rule); every other row prints `"choices": null`."""
    store = await HelperStore.connect(store_url)
    try:
        await _fill(store)
    finally:
        await store.close()
    expected = {
        "question_id": "venue",
        "options": [{"id": "hall-a", "label": "Зал «А», 40 мест"}, {"id": "roof", "label": "The roof"}],
        "free_text": False,
    }
    results = tmp_path / "results"
    code, shown = _starter(["show", "--owner", "anna", "--id", "q1"], store_url, results)
    assert code == 0 and json.loads(shown)["choices"] == expected
    for argv in (["list", "--owner", "anna"], ["unreported", "--owner", "anna"]):
        code, listed = _starter(argv, store_url, results)
        assert code == 0, argv
        choices = {view["helper_id"]: view["choices"] for view in json.loads(listed)}
        assert choices.pop("q1") == expected and choices and set(choices.values()) == {None}, argv


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_read_bench_fills_every_column_of_a_row(dialect: str) -> None:
    """The read benches fill rows column by column: a column added to the row must be added to their fill too, or
    their smoke run (a slow proof) fails only in CI."""
    from tools.bench.reads import _all_rows

    rows = list(_all_rows(owners=1, rows=5, dialect=dialect))
    assert len(rows) == 5 and all(len(row) == len(HELPER_ROW_COLUMNS) for row in rows)
