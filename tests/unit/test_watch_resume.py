"""R49: the live watch survives a repaint. Every line has an id; a watch started from a line's id (Last-Event-ID,
or the query parameter `last_event_id`) sends exactly the lines after that one, on any instance of the service,
and a fresh watch shows an open question with its choices.

The service's tests run on a real SQLite store, with no Temporal; one drops a real HTTP connection."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from config.settings import Settings
from contracts.core_api import Action, QuestionChoices, QuestionOption
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, HelperView, RowState
from starter.watch import REMOVED, LiveLine, LiveLines, Mark, scope_of
from store.helper_store import HelperStore
from tests.helpers import admitted_row, free_port, service_client

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)
VENUES = QuestionChoices(
    question_id="venue",
    options=[QuestionOption(id="hall-a", label="Hall A"), QuestionOption(id="roof", label="The roof")],
    free_text=True,
)
ASKED = [
    "unreported · outcome question: Which venue?",
    "  option hall-a · Hall A",
    "  option roof · The roof",
    "  or an answer in the owner's own words",
]


# --- the lines themselves: a watch started from any line's id goes on as the first would have ---------------


def _view(helper_id: str, state: RowState, **fields: Any) -> HelperView:
    base: dict[str, Any] = {
        "helper_id": helper_id,
        "state": state,
        "steps": 0,
        "work_tokens": 0,
        "input_tokens": 0,
        "model": "scripted",
        "admitted_at": NOW,  # every row admitted in the same moment: the ids order the lines all the same
        "result_dir": "/tmp/r",
    }
    return HelperView.model_validate({**base, **fields})


ACTION = Action(tool="send_mail", whom="bob@example.com", what="asked Hall A for a quote", at=NOW)
QUESTION = {"outcome_kind": OutcomeKind.QUESTION, "summary": "Which venue?", "choices": VENUES, "actions": [ACTION]}
# A life of three helpers, as successive listings of the owner's rows (each poll's).
POLLS = [
    [_view("venue", RowState.RUNNING), _view("report", RowState.WAITING, ahead=0)],
    [_view("venue", RowState.RUNNING, steps=2), _view("report", RowState.WAITING, ahead=0)],
    [_view("venue", RowState.UNREPORTED, steps=3, **QUESTION), _view("report", RowState.RUNNING)],
    [_view("venue", RowState.DELIVERED, steps=3, **QUESTION), _view("report", RowState.RUNNING, steps=4)],
    [_view("report", RowState.RUNNING, steps=4), _view("mail", RowState.RUNNING, steps=1)],
    # `venue` again: a new admission under the same id, the old row gone
    [
        _view("report", RowState.RUNNING, steps=4),
        _view("venue", RowState.WAITING, ahead=0, admitted_at=NOW.replace(hour=15)),
    ],
]


def _life() -> list[tuple[int, LiveLine]]:
    """Every line of the life, with the poll that made it."""
    live = LiveLines(Mark(0, scope_of("anna", None)))
    return [(poll, line) for poll, views in enumerate(POLLS) for line in live.update("anna", views)]


def _said(line: LiveLine) -> tuple[Any, ...]:
    """A line without the moment it was made."""
    return line.who, line.text, line.state, line.choices, line.id


def test_the_lines_ids_are_distinct_and_ordered_though_they_share_moments() -> None:
    lines = [line for _, line in _life()]
    counts = [Mark.parse(line.id, scope_of("anna", None)).count for line in lines]
    assert counts == list(range(1, len(lines) + 1))
    assert [line.text for line in lines] == [
        "admitted · running now",
        "admitted · waiting for a slot · nobody ahead",
        "running · 2 steps · 0 work tokens",
        *ASKED,
        "  action · send_mail · bob@example.com: asked Hall A for a quote",
        "got a slot · running now",
        "delivered · a chat turn read the outcome and answered the owner",
        "running · 4 steps · 0 work tokens",
        "admitted · running now",
        "running · 1 step · 0 work tokens",
        REMOVED,
        "admitted · waiting for a slot · nobody ahead",
        REMOVED,
    ]
    assert [line.helper_id for line in lines][-3:] == ["venue", "venue", "mail"]


def test_a_watch_started_from_any_lines_id_sends_exactly_the_lines_after_it() -> None:
    """Dropped after any line (mid-poll too: between a question's headline and its options), the resumed watch
    polls the same rows and says what the first would have said next: nothing lost, nothing repeated."""
    life = _life()
    scope = scope_of("anna", None)
    for index, (poll, line) in enumerate(life):
        resumed = LiveLines(Mark.parse(line.id, scope))
        rest = [_said(later) for views in POLLS[poll:] for later in resumed.update("anna", views)]
        assert rest == [_said(later) for _, later in life[index + 1 :]], line.text


def test_a_resumed_watch_says_the_net_change_of_a_row_changed_twice_since() -> None:
    """Dropped after the first line, the client comes back when the question is delivered: it gets the question
    whole, with its choices, and what it had not seen of the waiting helper, from its admission."""
    first = _life()[0][1]
    resumed = LiveLines(Mark.parse(first.id, scope_of("anna", None)))
    lines = resumed.update("anna", POLLS[3])
    assert [(line.helper_id, line.text) for line in lines] == [
        *[("venue", text.replace("unreported", "delivered")) for text in ASKED],
        ("venue", "  action · send_mail · bob@example.com: asked Hall A for a quote"),
        ("report", "admitted · running now"),
        ("report", "running · 4 steps · 0 work tokens"),
    ]
    assert lines[0].choices == VENUES and all(line.choices is None for line in lines[1:])


@pytest.mark.parametrize(
    ("last_event_id", "why"),
    [
        ("42", "not a line id this service gave"),
        ("2~1~" + scope_of("anna", None), "not a line id this service gave"),
        ("1~1~" + scope_of("boris", None), "of another watch"),
        ("1~1~" + scope_of("anna", "venue"), "of another watch"),
        ("1~x~" + scope_of("anna", None), "not a line id this service gave"),
        ("1~1~" + scope_of("anna", None) + "~venue:0000000z:r:0::::0", "not a line id this service gave"),
        ("1~1~" + scope_of("anna", None) + "~venue:00000000:q:0:::0", "not a line id this service gave"),
        ("1~1~" + scope_of("anna", None) + "~venue:00000000:r:0::maybe:0", "not a line id this service gave"),
        ("1~1~" + scope_of("anna", None) + "~x:00000000:r:0:::0~x:00000000:r:0:::0", "not a line id this service"),
        ("1~1~" + "x" * 20_000, "longer than"),
        ("1~0~" + scope_of("anna", None), "not a line id this service gave"),  # the first line is 1
        ("1~1~" + scope_of("anna", None) + "~venue:00000000:r:0:::3", "not a line id this service gave"),
    ],
)
def test_an_id_the_service_did_not_give_for_this_watch_is_refused(last_event_id: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Mark.parse(last_event_id, scope_of("anna", None))


# --- through the service: two instances on one store, a dropped HTTP connection -----------------------------


@pytest.fixture
async def settings(tmp_path: Path) -> Settings:
    store_url = f"sqlite+aiosqlite:///{tmp_path / 'helpers.sqlite3'}"
    store = await HelperStore.connect(store_url, run_migrations=True)
    await store.close()
    return Settings(store=store_url, results_dir=tmp_path / "results", temporal_address="127.0.0.1:9")


@pytest.fixture
async def first(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with service_client(settings) as client:
        yield client


@pytest.fixture
async def second(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """Another instance of the service on the same store: it never saw the first's streams."""
    async with service_client(settings) as client:
        yield client


def _row(helper_id: str, seq: int, state: RowState, settings: Settings) -> HelperRow:
    return admitted_row(
        "anna",
        helper_id,
        at=NOW,  # the same moment for every row
        result_dir=settings.results_dir / "anna" / f"{helper_id}.{seq}",
        seq=seq,
        state=state,
        task="Pick a venue",
        generation=2,
    )


class Rows:
    """The owner's rows, written as the worker writes them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.rows: dict[str, HelperRow] = {}
        self.generation = 2

    async def __aenter__(self) -> Rows:
        self.store = await HelperStore.connect(self.settings.store)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.store.close()

    async def admit(self, helper_id: str, state: RowState) -> None:
        row = _row(helper_id, len(self.rows) + 1, state, self.settings)
        self.rows[helper_id] = row
        assert await self.store.insert_admitted(row)

    async def write(self, helper_id: str, **changes: Any) -> None:
        row = self.rows[helper_id]
        self.generation += 1
        assert await self.store.write_state("anna", helper_id, row.seq, self.generation, **changes)

    async def ask(self, helper_id: str) -> None:
        await self.write(
            helper_id,
            state=RowState.UNREPORTED,
            outcome_kind=OutcomeKind.QUESTION,
            summary="Which venue?",
            choices=VENUES,
            finished_at=NOW,
        )

    async def remove(self, helper_id: str) -> None:
        await self.store.remove_rows("anna", [helper_id])


def _lines(stream: str) -> list[tuple[str, dict[str, Any]]]:
    """The `event: line` events of a stream: each with its id (and without the moment it was sent)."""
    events = []
    for block in stream.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields.get("event") == "line":
            data = json.loads(fields["data"])
            del data["at"]
            events.append((fields["id"], data))
    return events


async def _watch(api: httpx.AsyncClient, header: str | None = None, **params: str) -> httpx.Response:
    """A `once` watch of Anna's helpers; with `header`, from that Last-Event-ID."""
    headers = {} if header is None else {"Last-Event-ID": header}
    return await api.get("/v1/owners/anna/watch", params={"once": "true", **params}, headers=headers)


async def test_a_resumed_watch_on_another_instance_sends_exactly_the_missed_lines(
    settings: Settings, first: httpx.AsyncClient, second: httpx.AsyncClient
) -> None:
    async with Rows(settings) as rows:
        await rows.admit("venue", RowState.RUNNING)
        await rows.admit("report", RowState.WAITING)
        fresh = await _watch(first)
        assert fresh.text.startswith("retry: 1000\n")
        seen = _lines(fresh.text)
        assert [line["text"] for _, line in seen] == [
            "admitted · running now",
            "admitted · waiting for a slot · nobody ahead",
        ]
        stopped_at = seen[0][0]  # the connection dropped after the first line
        # Meanwhile: `venue` steps twice between polls and asks; `report` starts; `mail` is admitted in the same
        # moment as the others.
        await rows.write("venue", steps=1)
        await rows.write("venue", steps=2)
        await rows.ask("venue")
        await rows.write("report", state=RowState.RUNNING)
        await rows.admit("mail", RowState.RUNNING)

        resumed = await _watch(second, stopped_at)
        missed = _lines(resumed.text)
        assert [(line["helper_id"], line["text"]) for _, line in missed] == [
            *[("venue", text) for text in ASKED],
            ("report", "admitted · running now"),
            ("mail", "admitted · running now"),
        ]
        assert missed[0][1]["choices"] == VENUES.model_dump(mode="json")
        # The query parameter is the same; the header wins over it (an EventSource keeps its first URL).
        by_query = await _watch(first, last_event_id=stopped_at)
        assert _lines(by_query.text) == missed
        both = await _watch(second, stopped_at, last_event_id=missed[-1][0])
        assert [line["text"] for _, line in _lines(both.text)] == [line["text"] for _, line in missed]

        # Nothing repeated: from the last line, nothing is new until a row changes, on either instance.
        last = missed[-1][0]
        assert _lines((await _watch(first, last)).text) == []
        assert _lines((await _watch(second, last)).text) == []
        await rows.remove("report")
        await rows.write("mail", steps=1)
        after = _lines((await _watch(first, last)).text)
        assert [(line["helper_id"], line["text"]) for _, line in after] == [
            ("mail", "running · 1 step · 0 work tokens"),
            ("report", REMOVED),
        ]
        assert after[1][1]["state"] is None


async def test_a_fresh_watch_shows_the_open_question_with_its_choices(
    settings: Settings, first: httpx.AsyncClient
) -> None:
    """A page redrawn from nothing watches afresh: the still-open question comes with its options, on the owner's
    watch (`once`: the live one says the same first and goes on) and the helper's (which ends with the outcome)."""
    async with Rows(settings) as rows:
        await rows.admit("venue", RowState.RUNNING)
        await rows.ask("venue")
    for path, params in (
        ("/v1/owners/anna/watch", {"once": "true"}),
        ("/v1/owners/anna/helpers/venue/watch", {}),
        ("/v1/owners/anna/watch", {"helper_id": "venue"}),
    ):
        answered = await first.get(path, params=params)
        lines = _lines(answered.text)
        assert [line["text"] for _, line in lines] == ASKED, path
        assert lines[0][1]["choices"] == VENUES.model_dump(mode="json")


async def test_a_last_event_id_of_no_line_of_this_watch_is_refused_before_the_stream(
    settings: Settings, first: httpx.AsyncClient
) -> None:
    async with Rows(settings) as rows:
        await rows.admit("venue", RowState.RUNNING)
    [(owner_wide, _)] = _lines((await _watch(first)).text)
    for path, last_event_id, where in (
        ("/v1/owners/anna/watch", "garbage", "the Last-Event-ID header"),
        ("/v1/owners/anna/helpers/venue/watch", owner_wide, "the Last-Event-ID header"),
        ("/v1/owners/boris/watch", owner_wide, "the Last-Event-ID header"),
    ):
        answered = await first.get(path, headers={"Last-Event-ID": last_event_id})
        assert answered.status_code == 422 and answered.headers["content-type"] == "application/json"
        error = answered.json()["error"]
        assert error["code"] == "invalid_request" and error["message"].startswith(where), error
        assert "names no line of this watch" in error["message"] and "afresh" in error["message"]
    answered = await first.get("/v1/owners/anna/watch", params={"last_event_id": "1~2"})
    assert answered.status_code == 422
    assert answered.json()["error"]["message"].startswith("the query parameter last_event_id '1~2'")


def test_a_dropped_connection_is_resumed_on_a_restarted_service(settings: Settings) -> None:
    """Real HTTP: the client reads a line of a live stream and drops the connection; the service is stopped, the
    rows change, a new service starts; the client connects again with the line's id and gets the missed lines."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))},
        "HELPER_STORE_URL": settings.store.text,
        "HELPER_RESULTS_DIR": str(settings.results_dir),
        "TEMPORAL_ADDRESS": "127.0.0.1:9",
        "HELPER_ENV_FILE": os.devnull,
    }

    async def write(step: str) -> None:
        async with Rows(settings) as rows:
            if step == "admit":
                await rows.admit("venue", RowState.RUNNING)
            else:
                rows.rows["venue"] = _row("venue", 1, RowState.RUNNING, settings)
                await rows.ask("venue")

    asyncio.run(write("admit"))
    with _serving(env) as client:
        with client.stream("GET", "/v1/owners/anna/watch") as stream:
            assert stream.status_code == 200
            received = ""
            for chunk in stream.iter_text():
                received += chunk
                if "event: line" in received and received.endswith("\n\n"):
                    break  # the client drops the connection here
        [(stopped_at, line)] = _lines(received)
        assert line["text"] == "admitted · running now"
    asyncio.run(write("ask"))
    with (
        _serving(env) as client,
        client.stream("GET", "/v1/owners/anna/watch", headers={"Last-Event-ID": stopped_at}) as stream,
    ):
        received = ""
        for chunk in stream.iter_text():
            received += chunk
            if len(_lines(received)) == len(ASKED):
                break
    missed = _lines(received)
    assert [line["text"] for _, line in missed] == ASKED
    assert received.startswith("retry: 1000\n")


class _serving:
    """`python -m starter serve` on a free port, until the block ends."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __enter__(self) -> httpx.Client:
        port = free_port()
        self.service = subprocess.Popen(
            [sys.executable, "-m", "starter", "serve", "--bind", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.client.get("/livez").status_code == 200:
                    return self.client
            except httpx.HTTPError:
                pass
            assert self.service.poll() is None and time.monotonic() < deadline, "the service did not start"
            time.sleep(0.1)

    def __exit__(self, *_: object) -> None:
        self.client.close()
        self.service.terminate()
        try:
            self.service.wait(timeout=30)
        finally:
            self.service.kill()


def _ended(stream: str) -> dict[str, Any]:
    """The stream's `event: end` data; the stream must have ended with it."""
    blocks = [block for block in stream.split("\n\n") if block.strip()]
    fields = dict(line.split(": ", 1) for line in blocks[-1].splitlines() if ": " in line)
    assert fields.get("event") == "end", blocks[-1]
    return dict(json.loads(fields["data"]))


async def test_a_watch_of_one_helper_ends_once_its_row_is_gone_also_when_resumed(
    settings: Settings, first: httpx.AsyncClient, second: httpx.AsyncClient
) -> None:
    """R47, R53: a helper watch (not `once`) of a row that left the store says `removed` and ends with `reason: removed`
    within one poll; resumed after that line, it ends at once; a fresh watch of no row is a 404 before the stream,
    whether the row never was or is gone."""
    path = "/v1/owners/anna/helpers/venue/watch"
    async with Rows(settings) as rows:
        await rows.admit("venue", RowState.RUNNING)
        [(stopped_at, _)] = _lines((await first.get(path, params={"once": "true"})).text)
        await rows.remove("venue")
    async with asyncio.timeout(10):
        resumed = await second.get(path, headers={"Last-Event-ID": stopped_at})
    [(removed_id, removed)] = _lines(resumed.text)
    assert (removed["text"], removed["state"]) == (REMOVED, None)
    assert _ended(resumed.text) == {"reason": "removed", "outcome_kind": None}
    async with asyncio.timeout(10):
        again = await first.get(path, headers={"Last-Event-ID": removed_id})
    assert _lines(again.text) == [] and _ended(again.text)["reason"] == "removed"
    for fresh in (path, "/v1/owners/anna/helpers/never-was/watch", "/v1/owners/anna/watch?helper_id=never-was"):
        answered = await first.get(fresh)
        assert answered.status_code == 404, fresh
        assert answered.json()["error"]["code"] == "unknown_helper"


async def test_an_id_that_says_more_of_a_row_than_it_holds_is_refused(
    settings: Settings, first: httpx.AsyncClient
) -> None:
    """A well-formed id the service never gave: more option lines than the question has, another outcome, or more
    steps than the row counts. It is refused before the stream, as any id of no line is."""
    async with Rows(settings) as rows:
        await rows.admit("venue", RowState.RUNNING)
        await rows.ask("venue")
    lines = _lines((await _watch(first)).text)
    last = lines[-1][0]
    assert last.endswith(f":question:{len(VENUES.options) + 1}")  # the headline's line ids, then each option's
    for forged in (
        last.rsplit(":", 1)[0] + ":99",
        last.replace(":question:", ":completed:"),
        last.replace(":u:0:", ":u:7:"),
    ):
        assert forged != last
        answered = await _watch(first, forged)
        assert answered.status_code == 422, (forged, answered.text)
        assert "than its row holds" in answered.json()["error"]["message"]
    assert _lines((await _watch(first, last)).text) == []
