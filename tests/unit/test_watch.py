"""The live lines of `helper-starter watch` and the demo: plurals, cuts, change detection, ordering.

The lines are what a user reads, so the tests assert the exact text a helper's life produces.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts.core_api import Action
from domain.outcome import OutcomeKind
from domain.rows import HelperView, RowState
from starter.watch import LiveLine, LiveLines, cut, headline, in_time_order, plural, render
from store.helper_store import HelperStore
from tests.helpers import admitted_row

ROOT = Path(__file__).resolve().parents[2]

NOW = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)
QUESTION = "Should the venue be within walking distance of the office, or is a taxi fine?"


def _view(state: RowState, **fields: Any) -> HelperView:
    base: dict[str, Any] = {
        "helper_id": "pick-venue",
        "state": state,
        "steps": 0,
        "work_tokens": 0,
        "input_tokens": 0,
        "model": "scripted",
        "admitted_at": NOW,
        "result_dir": "/tmp/r",
    }
    return HelperView.model_validate({**base, **fields})


def _texts(live: LiveLines, *views: HelperView) -> list[str]:
    return [line.text for line in live.update("anna", views)]


def test_plurals() -> None:
    assert plural(0, "step") == "0 steps"
    assert plural(1, "step") == "1 step"
    assert plural(2, "step") == "2 steps"
    assert plural(1_200_000, "work token") == "1,200,000 work tokens"


def test_a_long_text_is_cut_at_a_word_and_ends_with_an_ellipsis() -> None:
    text = "Stopped at the work ceiling of 1,000,000 tokens; this is a partial outcome. " * 5
    line = cut(text, 60)
    assert len(line) <= 60 and line.endswith("…")
    assert line == "Stopped at the work ceiling of 1,000,000 tokens; this is a…"
    assert text.startswith(line[:-1])  # cut between words, never inside one


def test_a_short_text_is_kept_on_one_line_and_a_single_long_word_is_cut_hard() -> None:
    assert cut("two\nlines  here", 60) == "two lines here"
    assert cut("x" * 100, 10) == "x" * 9 + "…"


def test_the_question_is_shown_once() -> None:
    """The summary repeats the question in the core's words; the line shows the first paragraph only."""
    summary = f"The helper needs an answer: {QUESTION}\n\nI need an answer from the owner: {QUESTION}"
    assert headline(summary) == f"The helper needs an answer: {QUESTION}"

    live = LiveLines()
    _texts(live, _view(RowState.RUNNING, steps=2))
    lines = _texts(live, _view(RowState.UNREPORTED, steps=3, outcome_kind=OutcomeKind.QUESTION, summary=summary))
    assert lines == [f"unreported · outcome question: The helper needs an answer: {QUESTION}"]
    assert "".join(lines).count(QUESTION) == 1


def test_a_helper_is_admitted_before_it_runs_and_steps_show_only_when_they_change() -> None:
    live = LiveLines()
    assert _texts(live, _view(RowState.RUNNING)) == ["admitted · running now"]  # never "running · 0 steps"
    assert _texts(live, _view(RowState.RUNNING)) == []
    assert _texts(live, _view(RowState.RUNNING, steps=1, work_tokens=2300)) == ["running · 1 step · 2,300 work tokens"]
    assert _texts(live, _view(RowState.RUNNING, steps=1, work_tokens=2300)) == []
    assert _texts(live, _view(RowState.RUNNING, steps=2, work_tokens=4100)) == ["running · 2 steps · 4,100 work tokens"]


def test_a_helper_first_seen_mid_run_is_admitted_then_running() -> None:
    live = LiveLines()
    assert _texts(live, _view(RowState.RUNNING, steps=5, work_tokens=9000)) == [
        "admitted · running now",
        "running · 5 steps · 9,000 work tokens",
    ]


def test_a_waiting_helper_gets_its_slot_then_runs() -> None:
    live = LiveLines()
    assert _texts(live, _view(RowState.WAITING, ahead=0)) == ["admitted · waiting for a slot · nobody ahead"]
    assert _texts(live, _view(RowState.WAITING, ahead=0)) == []
    assert _texts(live, _view(RowState.RUNNING)) == ["got a slot · running now"]


def test_waiting_behind_others_names_how_many() -> None:
    live = LiveLines()
    assert _texts(live, _view(RowState.WAITING, ahead=2)) == ["admitted · waiting for a slot · 2 helpers ahead"]
    assert _texts(live, _view(RowState.WAITING, ahead=1)) == ["waiting for a slot · 1 helper ahead"]


def test_a_close_while_running_then_the_confirmed_stop() -> None:
    live = LiveLines()
    _texts(live, _view(RowState.RUNNING, steps=2))
    assert _texts(live, _view(RowState.CLOSED, steps=2)) == [
        "closed while running · its slot is held until the core confirms the stop"
    ]
    summary = "Closed by the owner. The last completed message is kept for manual reading.\n\nStep 2 of …"
    assert _texts(live, _view(RowState.CLOSED, steps=2, outcome_kind=OutcomeKind.CLOSED, summary=summary)) == [
        "stopped · the core confirmed, the slot is free · outcome closed: Closed by the owner. The last completed "
        "message is kept for manual reading."
    ]


def test_the_outcome_is_shown_once_and_a_later_delivery_gets_a_short_line() -> None:
    action = Action(tool="send_mail", whom="bob@example.com", what="sent a mail with the subject 'Q3'", at=NOW)
    done = {"steps": 4, "outcome_kind": OutcomeKind.COMPLETED, "summary": "Done after 4 steps.", "actions": [action]}
    live = LiveLines()
    _texts(live, _view(RowState.RUNNING, steps=3))
    assert _texts(live, _view(RowState.UNREPORTED, **done)) == [
        "unreported · outcome completed: Done after 4 steps.",
        "  action · send_mail · bob@example.com: sent a mail with the subject 'Q3'",
    ]
    assert _texts(live, _view(RowState.DELIVERED, **done)) == [
        "delivered · a chat turn read the outcome and answered the owner"
    ]
    assert _texts(live, _view(RowState.CLOSED, **done)) == ["closed by the owner · the outcome is kept for reading"]


def test_every_line_fits_and_a_cut_line_ends_with_an_ellipsis() -> None:
    summary = "Stopped at the work ceiling of 1,000,000 tokens and " + "then kept going on and on " * 20
    live = LiveLines()
    [line] = _texts(live, _view(RowState.UNREPORTED, steps=9, outcome_kind=OutcomeKind.PARTIAL, summary=summary))
    assert len(line) <= 160 and line.endswith("…") and not line.endswith(" …")


def test_each_owner_and_helper_is_tracked_on_its_own() -> None:
    live = LiveLines()
    lines = live.update("anna", [_view(RowState.RUNNING), _view(RowState.WAITING, helper_id="h2", ahead=0)])
    assert [(line.who, line.text) for line in lines] == [
        ("anna/pick-venue", "admitted · running now"),
        ("anna/h2", "admitted · waiting for a slot · nobody ahead"),
    ]
    assert [line.who for line in live.update("boris", [_view(RowState.RUNNING)])] == ["boris/pick-venue"]


def test_render_puts_time_who_and_what_in_columns() -> None:
    assert render("anna/pick-venue", "admitted · running now", datetime(2026, 1, 1, 9, 5, 7)) == (
        "09:05:07  anna/pick-venue          admitted · running now"
    )


# --- the console script: `python -m starter watch`, on a store of its own, Temporal down ---------------


@pytest.fixture(scope="module")
def watched_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A migrated SQLite store holding three of Anna's helpers: one running (one step), one waiting, one that finished
    ten minutes before they were admitted; the watch's clock is UTC."""
    tmp = tmp_path_factory.mktemp("watch")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))},
        "TZ": "UTC",
        "TEMPORAL_ADDRESS": "127.0.0.1:9",  # nothing listens: watch reads the store only
        "HELPER_STORE_URL": f"sqlite+aiosqlite:///{tmp / 'helpers.sqlite3'}",
        "HELPER_RESULTS_DIR": str(tmp / "results"),
    }
    subprocess.run([sys.executable, "-m", "store", "migrate"], cwd=ROOT, env=env, check=True, capture_output=True)

    async def insert() -> None:
        store = await HelperStore.connect(env["HELPER_STORE_URL"])
        try:
            for seq, helper_id, state, steps in (
                (1, "mail-report", RowState.RUNNING, 1),
                (2, "later", RowState.WAITING, 0),
                (3, "done", RowState.UNREPORTED, 3),
            ):
                finished = {
                    "admitted_at": NOW - timedelta(minutes=20),
                    "started_at": NOW - timedelta(minutes=20),
                    "finished_at": NOW - timedelta(minutes=10, seconds=-7),
                    "outcome_kind": OutcomeKind.COMPLETED,
                    "summary": "Done: 'Find the Q3 note' after 3 steps. No actions were performed.",
                }
                row = admitted_row(
                    "anna",
                    helper_id,
                    at=NOW,
                    result_dir=tmp / "results" / helper_id,
                    seq=seq,
                    state=state,
                    task="Find the Q3 note",
                    steps=steps,
                    work_tokens=2300 * steps,
                    **(finished if state is RowState.UNREPORTED else {}),
                )
                assert await store.insert_admitted(row)
        finally:
            await store.close()

    asyncio.run(insert())
    return env


def _message(line: str) -> str:
    """A printed line without its time column."""
    assert line[:8].count(":") == 2, line
    return line[10:]


def _watch_one(env: dict[str, str], owner: str, helper_id: str) -> subprocess.Popen[bytes]:
    """`helper-starter watch --id` as its own process, as Iva or an operator runs it."""
    return subprocess.Popen(
        [sys.executable, "-m", "starter", "watch", "--owner", owner, "--id", helper_id],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _first_line(process: subprocess.Popen[bytes]) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 60)
    assert ready, "watch printed nothing within 60 s"
    return process.stdout.readline().decode()


def test_watch_once_prints_the_current_lines_from_the_store_in_the_order_they_happened(
    watched_store: dict[str, str],
) -> None:
    """An admission at its admission time and an outcome at its finish time, however long ago; a step count, which
    the row does not date, when the watch read it; the lines of every helper in the order of those times."""
    began = datetime.now(UTC).replace(microsecond=0)
    done = subprocess.run(
        [sys.executable, "-m", "starter", "watch", "--owner", "anna", "--once"],
        cwd=ROOT,
        env=watched_store,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == b""
    lines = done.stdout.decode().splitlines()
    assert [_message(line) for line in lines] == [
        "anna/done                unreported · outcome completed: Done: 'Find the Q3 note' after 3 steps. No actions "
        "were performed.",
        "anna/mail-report         admitted · running now",
        "anna/later               admitted · waiting for a slot · nobody ahead",
        "anna/mail-report         running · 1 step · 2,300 work tokens",
    ]
    times = [line[:8] for line in lines]
    assert times[0] == "13:50:07" and times[1] == times[2] == "14:00:00", lines
    seen = datetime.combine(began.date(), datetime.strptime(times[3], "%H:%M:%S").time(), UTC)
    assert abs((seen - began).total_seconds()) < 60, lines


def test_a_polls_lines_come_in_time_order_across_helpers_and_in_their_own_order_within_one() -> None:
    """`watch` prints a poll's lines by their times, not helper by helper; a helper's own lines keep their order even
    when a line the poll dates (a step count) is earlier than its row's own time (a worker's clock ahead)."""

    def line(helper_id: str, text: str, at: datetime) -> LiveLine:
        return LiveLine(f"anna/{helper_id}", text, helper_id, RowState.RUNNING, at, None, "")

    polled = [  # as LiveLines gives them: helper by helper
        line("early", "admitted · running now", NOW - timedelta(minutes=5)),
        line("early", "running · 2 steps · 0 work tokens", NOW),
        line("waits", "admitted · waiting for a slot · nobody ahead", NOW - timedelta(minutes=7)),
        line("skewed", "admitted · running now", NOW + timedelta(hours=1)),
        line("skewed", "running · 1 step · 0 work tokens", NOW),
        line("done", "unreported · outcome completed: Done.", NOW - timedelta(minutes=6)),
    ]
    assert [(line.helper_id, line.text) for line in in_time_order(polled)] == [
        ("waits", "admitted · waiting for a slot · nobody ahead"),
        ("done", "unreported · outcome completed: Done."),
        ("early", "admitted · running now"),
        ("early", "running · 2 steps · 0 work tokens"),
        ("skewed", "admitted · running now"),
        ("skewed", "running · 1 step · 0 work tokens"),
    ]


def test_watch_one_helper_until_ctrl_c_exits_0_without_a_traceback(watched_store: dict[str, str]) -> None:
    process = _watch_one(watched_store, "anna", "later")
    try:
        # The first line says the watch is running (and past its imports), so Ctrl-C now reaches the watch.
        first = _first_line(process)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert _message(first) == "anna/later               admitted · waiting for a slot · nobody ahead\n"
    assert process.returncode == 0
    assert out == b"" and b"Traceback" not in err and err == b""


def test_a_follow_up_names_the_helper_it_continues_and_the_earlier_one_says_who_answered_it() -> None:
    live = LiveLines()
    earlier = _view(RowState.UNREPORTED, outcome_kind=OutcomeKind.QUESTION, summary=QUESTION)
    _texts(live, earlier)
    follow_up = _view(RowState.WAITING, helper_id="venue-choice", follow_up_of="pick-venue", ahead=1)
    answered = earlier.model_copy(update={"state": RowState.DELIVERED, "followed_up_by": "venue-choice"})
    assert _texts(live, answered, follow_up) == [
        "delivered · the owner answered it: venue-choice follows it up",
        "admitted · follows up pick-venue · waiting for a slot · 1 helper ahead",
    ]
    running = follow_up.model_copy(update={"state": RowState.RUNNING})
    assert _texts(live, answered, running) == ["got a slot · running now"]


def test_a_watch_of_one_helper_ends_by_itself_once_the_helper_has_its_outcome(
    watched_store: dict[str, str], tmp_path: Path
) -> None:
    """As `gh run watch` ends with its run: no Ctrl-C is needed once the helper's outcome is in its row (R47)."""
    database = watched_store["HELPER_STORE_URL"].removeprefix("sqlite+aiosqlite:///")

    async def insert() -> None:
        store = await HelperStore.connect(watched_store["HELPER_STORE_URL"])
        try:
            row = admitted_row(
                "boris",
                "obzor",
                at=NOW,
                result_dir=tmp_path / "obzor",
                state=RowState.RUNNING,
                task="Обзор рынка",
                language="ru",
                steps=2,
                work_tokens=4000,
            )
            assert await store.insert_admitted(row)
        finally:
            await store.close()

    asyncio.run(insert())
    process = _watch_one(watched_store, "boris", "obzor")
    try:
        first = _first_line(process)
        with sqlite3.connect(database) as connection:
            connection.execute(
                "UPDATE helper_rows SET state = 'unreported', outcome_kind = 'completed', summary = 'Готово.' "
                "WHERE owner = 'boris' AND helper_id = 'obzor'"
            )
        out, err = process.communicate(timeout=30)  # no signal: the watch ends by itself
    finally:
        process.kill()
    assert _message(first) == "boris/obzor              admitted · running now\n"
    assert process.returncode == 0 and err == b""
    assert [_message(line) for line in out.decode().splitlines()][-1] == (
        "boris/obzor              unreported · outcome completed: Готово."
    )


def test_a_watch_of_no_such_helper_says_so_and_ends(watched_store: dict[str, str]) -> None:
    """R47, R53: `watch --id` of an id with no row ends at once with `unknown_helper`, as `--once` does, instead of
    printing nothing until interrupted."""
    for once in ([], ["--once"]):
        done = subprocess.run(
            [sys.executable, "-m", "starter", "watch", "--owner", "anna", "--id", "never-was", *once],
            cwd=ROOT,
            env=watched_store,
            capture_output=True,
            timeout=60,
        )
        error = json.loads(done.stdout)["error"]
        assert (done.returncode, error["code"]) == (1, "unknown_helper"), done
        assert error["message"] == "There is no helper never-was."
