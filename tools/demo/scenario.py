"""The demo: helpers launched through the starter exactly as Iva would, and each one's life shown live.

Two owners. Anna (English) gets three helpers at once (one mails a report with authority, one asks a
question, one runs into the work ceiling), a fourth that is refused, then three long runs of which one
is closed while running: its slot stays held until the core confirms the stop, and a helper admitted
meanwhile waits for exactly that slot. Boris (Russian) gets one helper that hits the work ceiling, to
show the stop explained in his language. Then Anna answers the venue question and grants an authorization:
follow-ups continue that work. Iva's side reads the unreported outcomes and marks them delivered
after answering, as a chat turn would.

Nothing here depends on how fast the machine is: the reference core holds scripted helpers on latches
(`reference.core.latches`) that the scenario releases once it has shown what must happen while they
run, e.g. the first wave stays running until the fourth helper has been refused, and long-a's stop is
confirmed only after the helper admitted meanwhile was seen waiting for its slot.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from config.settings import Settings
from domain.outcome import OutcomeKind
from domain.rows import HelperView, RowState
from protocol.errors import Unavailable
from reference.core.script import scripted_task
from starter.client import HelperClient
from starter.inputs import delivered_request, read_request
from starter.watch import POLL_INTERVAL_S, LiveLines, cut, render

ANNA = "anna"
BORIS = "boris"
FIRST_WAVE = ["mail-report", "pick-venue", "market-scan"]
LONG_RUNS = ["long-a", "long-b", "long-c"]
# Latches of the reference core (see reference/core/latches.py).
FIRST_WAVE_LATCH = "first-wave"  # the first wave makes no call until the fourth helper was refused
LONG_RUNS_LATCH = "long-runs"  # the long runs stay running (after two calls) until each is closed
LONG_A_STOP_LATCH = "long-a-stop"  # the core confirms long-a's stop only once after-close was seen waiting


@dataclass
class Expected:
    owner: str
    helper_id: str
    outcome: OutcomeKind | None  # None: must be refused
    check: Callable[[HelperView], str | None] | None = None  # returns a problem, or None


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)

    def expect(self, condition: bool, problem: str) -> None:
        if not condition:
            self.problems.append(problem)


def _say(who: str, message: str) -> None:
    print(render(who, message, datetime.now()), flush=True)


class Watcher:
    """Polls the store (as Iva reads it, with the lines of `helper-starter watch`) and the chat's inbox."""

    def __init__(self, client: HelperClient, chat_url: str, owners: list[str]) -> None:
        self.client = client
        self.chat_url = chat_url
        self.owners = owners
        self.live = LiveLines()
        self.events_seen: dict[str, int] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self._task: asyncio.Task[None] | None = None
        # One poll at a time: a slower, older read printed after a newer one would show a helper going back.
        self._polling = asyncio.Lock()

    @property
    def views(self) -> dict[tuple[str, str], HelperView]:
        return self.live.views

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.poll()

    async def _run(self) -> None:
        while True:
            await self.poll()
            await asyncio.sleep(POLL_INTERVAL_S)

    async def poll(self) -> None:
        async with self._polling, httpx.AsyncClient(timeout=5) as http:
            for owner in self.owners:
                for line in self.live.update(owner, await self.client.list_helpers(owner)):
                    _say(line.who, line.text)
                try:
                    events = (await http.get(f"{self.chat_url}/v1/owners/{owner}/events")).json()
                except httpx.HTTPError:
                    continue
                self.events[owner] = events
                for event in events[self.events_seen.get(owner, 0) :]:
                    _say(f"chat({owner})", cut(f"system event {event['key']}: {event['text']}"))
                self.events_seen[owner] = len(events)


async def run_scenario(settings: Settings) -> list[str]:
    """Run the whole demo; return the problems found (empty when every helper did what it should)."""
    client = await HelperClient.connect(settings)
    watcher = Watcher(client, settings.chat_url, [ANNA, BORIS])
    watcher.start()
    report = Report()
    try:
        await _first_wave(client, watcher, report, settings)
        await _close_while_running(client, watcher, report, settings)
        await _follow_ups(client, watcher, report)
        await _iva_reads_and_answers(client, report)
    finally:
        await watcher.stop()
        await client.aclose()
    _check_outcomes(watcher, report)
    return report.problems


# A stack just started on a loaded machine may answer a first admission `unavailable` (taken too late).
START_TRIES = 3


async def _start(client: HelperClient, watcher: Watcher, owner: str, helper_id: str, task: str, **fields: Any) -> Any:
    """Admit a helper; the watcher's "admitted" line follows at once, before any line about its running."""
    request = {"owner": owner, "helper_id": helper_id, "task": task, "model": "scripted", **fields}
    for attempt in range(1, START_TRIES + 1):
        try:
            admission = await client.start(request)
            break
        except Unavailable as error:  # nothing taken: asked again after the time it names, as a caller must
            if attempt == START_TRIES:
                raise
            await asyncio.sleep(error.retry_after_s or 1)
    await watcher.poll()
    return admission


async def _release(settings: Settings, latch: str, why: str) -> None:
    """Release a latch of the reference core: the scripted helpers held on it go on."""
    async with httpx.AsyncClient(base_url=settings.core_url, timeout=10) as http:
        response = await http.post(f"/v1/demo/latches/{latch}/release")
        response.raise_for_status()
    _say("demo", f"latch {latch} released · {why}")


async def _close(client: HelperClient, watcher: Watcher, owner: str, helper_id: str) -> Any:
    answer = await client.close(owner, helper_id)
    _say(f"{owner}/{helper_id}", f"Anna closes it · answer: row {answer.state.value}, slot held: {answer.slot_held}")
    await watcher.poll()
    return answer


async def _first_wave(client: HelperClient, watcher: Watcher, report: Report, settings: Settings) -> None:
    print("\n— Anna hands three tasks to helpers; a fourth is one too many —", flush=True)
    # The three make no model call before the fourth was refused, so all three are still open then.
    held = {"hold_until": FIRST_WAVE_LATCH}
    await _start(
        client,
        watcher,
        ANNA,
        "mail-report",
        scripted_task(
            "Find the Q3 revenue note and mail a short summary to Bob.",
            steps=4,
            step_ms=900,
            tool_calls=[
                {"step": 1, "tool": "search_notes", "args": {"query": "Q3"}},
                {
                    "step": 3,
                    "tool": "send_mail",
                    "args": {"to": "bob@example.com", "subject": "Q3 revenue", "body": "Revenue grew 12%."},
                },
            ],
            **held,
        ),
        boundary=["send_mail to bob@example.com"],
    )
    await _start(
        client,
        watcher,
        ANNA,
        "pick-venue",
        scripted_task(
            "Shortlist venues for the team dinner on Friday.\nBudget: 40 EUR per person, twelve people.",
            steps=3,
            step_ms=900,
            end="question",
            question="Should the venue be within walking distance of the office, or is a taxi fine?",
            question_id="venue",
            options=[("walk", "Within walking distance"), ("taxi", "A taxi is fine")],
            free_text=True,
            **held,
        ),
    )
    await _start(
        client,
        watcher,
        ANNA,
        "market-scan",
        scripted_task(
            "Scan every competitor's pricing page and compare plans.",
            end="run",
            steps=80,
            step_ms=900,
            input_tokens=150_000,
            input_growth=120_000,
            output_tokens=150_000,
            **held,
        ),
    )
    # The fourth goes through the console script, as Iva's tool call would, to show a refusal.
    code, answer = await _cli(
        settings,
        ["start", "--owner", ANNA, "--id", "extra", "--model", "scripted", "--task", "Book a table for Saturday."],
    )
    error = answer.get("error", {})
    if error:
        _say(f"{ANNA}/extra", f"refused (exit {code}) · {error.get('code')}: {error.get('message')}")
    else:
        _say(f"{ANNA}/extra", f"NOT refused (exit {code}) · {answer}")
    report.expect(
        code == 1 and error.get("code") == "too_many_open", f"extra: expected a too_many_open refusal, got {answer}"
    )
    report.expect(
        sorted(error.get("open_ids", [])) == sorted(FIRST_WAVE),
        f"extra: the refusal should name the three open helpers, got {error.get('open_ids')}",
    )
    await _release(settings, FIRST_WAVE_LATCH, "the three helpers make their first calls")
    await _start(
        client,
        watcher,
        BORIS,
        "obzor-rynka",
        scripted_task(
            "Собрать все отзывы о поставщиках за год.",
            end="run",
            steps=80,
            step_ms=900,
            input_tokens=200_000,
            input_growth=200_000,
            output_tokens=200_000,
        ),
        language="ru",
    )
    first_wave = [(ANNA, helper_id) for helper_id in FIRST_WAVE] + [(BORIS, "obzor-rynka")]
    await _wait_for(
        lambda: all(_kind(watcher, owner, helper_id) is not None for owner, helper_id in first_wave),
        "the first wave to finish",
        timeout=120,
    )
    # Iva answers in a turn only after the chat was told, so the automatic report is never pre-empted.
    await _wait_for(
        lambda: set(FIRST_WAVE) <= _told(watcher, ANNA), "the chat to be told about the first wave", timeout=60
    )


async def _close_while_running(client: HelperClient, watcher: Watcher, report: Report, settings: Settings) -> None:
    print("\n— Three long runs; one is closed while running; a new helper waits for its slot —", flush=True)
    # Two calls each, then held: they are still running whenever the scenario closes them.
    long_run = {"end": "run", "steps": 80, "step_ms": 300, "hold_until": LONG_RUNS_LATCH, "hold_at_step": 3}
    await _start(
        client,
        watcher,
        ANNA,
        "long-a",
        scripted_task("Watch the shared inbox for replies.", cancel_hold_until=LONG_A_STOP_LATCH, **long_run),
    )
    await _start(client, watcher, ANNA, "long-b", scripted_task("Draft the weekly digest.", **long_run))
    await _start(client, watcher, ANNA, "long-c", scripted_task("Collect travel options for March.", **long_run))
    await _wait_for(lambda: all(_steps(watcher, ANNA, h) >= 2 for h in LONG_RUNS), "the long runs to start")
    answer = await _close(client, watcher, ANNA, "long-a")
    report.expect(
        answer.state is RowState.CLOSED and answer.slot_held, f"long-a: closed row with slot held, got {answer}"
    )
    admission = await _start(
        client, watcher, ANNA, "after-close", scripted_task("Summarize today's calendar.", steps=3, step_ms=700)
    )
    report.expect(
        admission.status == "waiting" and admission.ahead == 0,
        f"after-close: should wait for long-a's slot with nobody ahead, got {admission}",
    )
    waiting = watcher.views.get((ANNA, "after-close"))
    report.expect(
        waiting is not None and waiting.state is RowState.WAITING,
        f"after-close: should still wait while long-a's stop is unconfirmed, got {waiting}",
    )
    await _release(settings, LONG_A_STOP_LATCH, "the core confirms long-a's stop, which frees its slot")
    await _wait_for(lambda: _kind(watcher, ANNA, "after-close") is not None, "after-close to finish", timeout=60)
    for helper_id in ("long-b", "long-c"):
        await _close(client, watcher, ANNA, helper_id)
    await _wait_for(
        lambda: all(_kind(watcher, ANNA, h) is OutcomeKind.CLOSED for h in LONG_RUNS),
        "the long runs to stop",
        timeout=60,
    )
    closed_at = watcher.views[(ANNA, "long-a")].finished_at
    started_at = watcher.views[(ANNA, "after-close")].started_at
    report.expect(
        closed_at is not None and started_at is not None and started_at >= closed_at,
        f"after-close started at {started_at}, before long-a's slot was freed at {closed_at}",
    )


async def _follow_ups(client: HelperClient, watcher: Watcher, report: Report) -> None:
    print("\n— Anna answers the venue question and grants an authorization; follow-ups continue the work —", flush=True)
    # The answer's own task does not hold the budget: the follow-up knows it because the core carried the
    # earlier conversation on (`recall` makes the scripted model quote what it remembers).
    _say(f"{ANNA}/pick-venue", "Anna answers the question: walking distance")
    await _start(
        client,
        watcher,
        ANNA,
        "venue-choice",
        scripted_task("Walking distance, please. Book the best one.", steps=2, step_ms=700, recall="Budget"),
        follow_up="pick-venue",
    )
    await _start(
        client,
        watcher,
        ANNA,
        "send-contract",
        scripted_task(
            "Send the signed contract to legal.",
            steps=2,
            step_ms=700,
            end="authorization",
            authorization="send_mail to legal@example.com",
        ),
    )
    await _wait_for(lambda: _kind(watcher, ANNA, "send-contract") is not None, "send-contract to stop", timeout=60)
    _say(f"{ANNA}/send-contract", "Anna says yes: the follow-up may send that mail")
    await _start(
        client,
        watcher,
        ANNA,
        "send-contract-ok",
        scripted_task(
            "Yes, send it.",
            steps=2,
            step_ms=700,
            tool_calls=[
                {
                    "step": 1,
                    "tool": "send_mail",
                    "args": {"to": "legal@example.com", "subject": "Contract", "body": "Signed copy attached."},
                }
            ],
        ),
        follow_up="send-contract",
        boundary=["send_mail to legal@example.com"],
    )
    followed = ["venue-choice", "send-contract-ok"]
    await _wait_for(lambda: all(_kind(watcher, ANNA, h) is not None for h in followed), "the follow-ups", timeout=60)
    venue = watcher.views.get((ANNA, "venue-choice"))
    report.expect(
        venue is not None and venue.outcome_kind is OutcomeKind.COMPLETED and "40 EUR" in (venue.summary or ""),
        f"venue-choice: should complete knowing the budget pick-venue was given, got {venue}",
    )
    sent = watcher.views.get((ANNA, "send-contract-ok"))
    mails = [a for a in (sent.actions if sent else []) if a.tool == "send_mail" and "legal@example.com" in a.whom]
    report.expect(
        sent is not None and sent.outcome_kind is OutcomeKind.COMPLETED and len(mails) == 1,
        f"send-contract-ok: should send the mail to legal once, got {sent}",
    )
    report.expect(
        _kind(watcher, ANNA, "send-contract") is OutcomeKind.AUTHORIZATION,
        "send-contract: should end waiting for authorization",
    )


async def _iva_reads_and_answers(client: HelperClient, report: Report) -> None:
    print("\n— Iva reads the unreported outcomes in a turn, answers, and marks them delivered —", flush=True)
    unreported = await client.unreported(ANNA)
    ids = [view.helper_id for view in unreported]
    _say(f"iva({ANNA})", f"unreported: {', '.join(ids) or 'none'}")
    if not ids:
        report.expect(False, "no unreported outcomes for Anna")
        return
    await client.read(read_request(ANNA, "turn-1", ids))
    answer = "Here is what your helpers found: ..."
    delivered = await client.delivered(delivered_request(ANNA, "turn-1", answer_chars=len(answer)))
    _say(f"iva({ANNA})", f"answered in turn-1 and marked delivered: {', '.join(delivered.delivered)}")
    report.expect(sorted(delivered.delivered) == sorted(ids), f"delivered {delivered.delivered}, read {ids}")


def _check_outcomes(watcher: Watcher, report: Report) -> None:
    def kind_is(owner: str, helper_id: str, kind: OutcomeKind) -> None:
        actual = _kind(watcher, owner, helper_id)
        report.expect(actual is kind, f"{owner}/{helper_id}: expected outcome {kind.value}, got {actual}")

    kind_is(ANNA, "mail-report", OutcomeKind.COMPLETED)
    kind_is(ANNA, "pick-venue", OutcomeKind.QUESTION)
    kind_is(ANNA, "market-scan", OutcomeKind.PARTIAL)
    kind_is(ANNA, "after-close", OutcomeKind.COMPLETED)
    for helper_id in ("long-a", "long-b", "long-c"):
        kind_is(ANNA, helper_id, OutcomeKind.CLOSED)
    kind_is(BORIS, "obzor-rynka", OutcomeKind.PARTIAL)
    mail = watcher.views.get((ANNA, "mail-report"))
    report.expect(
        mail is not None and any(a.tool == "send_mail" and "bob@example.com" in a.whom for a in mail.actions),
        "mail-report: the outcome should list the mail sent to bob@example.com",
    )
    scan = watcher.views.get((ANNA, "market-scan"))
    report.expect(
        scan is not None and "work ceiling" in (scan.summary or ""), "market-scan: stop should name the work ceiling"
    )
    obzor = watcher.views.get((BORIS, "obzor-rynka"))
    report.expect(
        obzor is not None and "пределе работы" in (obzor.summary or ""), "obzor-rynka: stop should be in Russian"
    )
    venue = watcher.views.get((ANNA, "pick-venue"))
    report.expect(
        venue is not None and "walking distance" in (venue.summary or ""),
        "pick-venue: outcome should carry the question",
    )
    offered = venue.choices if venue is not None else None
    report.expect(
        offered is not None and offered.question_id == "venue" and [o.id for o in offered.options] == ["walk", "taxi"],
        f"pick-venue: outcome should offer the choices walk and taxi, got {offered}",
    )
    report.expect(bool(watcher.events.get(ANNA)), "the chat received no system event for Anna")
    told = _told(watcher, ANNA)
    report.expect(
        {"mail-report", "pick-venue", "market-scan"} <= told,
        f"the chat should have been told about the first wave, was told about {sorted(told)}",
    )
    report.expect(not told & {"long-a", "long-b", "long-c"}, "closed helpers must not be reported automatically")


def _kind(watcher: Watcher, owner: str, helper_id: str) -> OutcomeKind | None:
    view = watcher.views.get((owner, helper_id))
    return None if view is None else view.outcome_kind


def _told(watcher: Watcher, owner: str) -> set[str]:
    """The helpers the chat was told about in a system event."""
    return {helper_id for event in watcher.events.get(owner, []) for helper_id in event["helper_ids"]}


def _steps(watcher: Watcher, owner: str, helper_id: str) -> int:
    view = watcher.views.get((owner, helper_id))
    return 0 if view is None else view.steps


async def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f} s")
        await asyncio.sleep(0.2)


async def _cli(settings: Settings, arguments: list[str]) -> tuple[int, dict[str, Any]]:
    environment = {
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "HELPER_STORE_URL": settings.store.text,
        "HELPER_RESULTS_DIR": str(settings.results_dir),
        "HELPER_CODEC_KEYS": settings.codec_keys or "",
        "PATH": "",
    }
    process = await asyncio.create_subprocess_exec(
        # stderr only repeats the JSON error in one line; the scenario prints its own line about it.
        sys.executable,
        "-m",
        "starter",
        *arguments,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
    )
    output, _ = await process.communicate()
    return process.returncode or 0, json.loads(output or b"{}")
