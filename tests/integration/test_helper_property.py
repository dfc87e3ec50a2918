"""R35, R36, R37, R38: whatever the core does and whenever, a helper keeps its promises.

Hypothesis generates a *scenario*: how the core answers the create (slow past the call bound, until some
moment or for ever; the next n answers lost, by a dropped connection or a hang), steps added at some moments
(some past the work ceiling), a misbehaviour of the core for a window of time (any of the fake's modes, on
snapshots or also on finish-now and cancel), how it answers finish-now (at once, slowly, ignored, answers
lost) and cancel (stops at once, slowly, only "later", answers lost), an owner close at some moment, the
session's end at some moment or never (completed, partial, failed, question, authorization, cancelled,
interrupted), resets that fail, and sometimes a second helper of the same owner waiting for the one running
slot. The REAL helper workflow runs it, on the real worker (`worker.running_worker`), on the time-skipping
server, against the programmable fake core (`tests/fakes/fake_core.py`), and each example must show:

1. the helper finalizes exactly once (R19): one finalizer's marker in its history, the workflow
   completed with that kind, and the row's outcome, once seen, never changes (sampled while it runs);
2. the outcome is final no later than the hard ceiling plus one check interval after the helper started
   (R35; the row's times are the server's, so this holds while time skips);
3. one idempotency key, so at most one session, per helper, however many creates were sent (R9, R38), and
   never more than `max_running` running sessions per owner, counting those whose create answer was lost
   (R6, R38; counted at every create and sampled; a session stops counting once the runtime asked the core
   to reset it: a core refusing that is R20's parked session, not a slot);
4. no store write fails (R37): no WARNING+ log of an unexpected exception (OverflowError, IntegrityError,
   DataError, ValueError, ...) from the activities, the store or the SDK's activity worker;
5. no workflow-task failure in the helper's (or its coordinator's) history;
6. nothing unbounded crossed Temporal and nothing malformed or foreign reached the row (R36, R37): every
   history event under 256 KB; in the row no control character, no text of another session, no more work
   tokens than its session really did, at most 100 actions and 64,000 characters of message.

One time-skipping server, one fake core and one worker serve every example; they live on an event loop in
a thread of their own, and each example runs there with its own owner and helper ids. Time skips only
while the driver awaits `env.sleep()`, so it walks the scenario's timeline in skipped time; the core calls
themselves take real time, so a slow answer here takes 1 s. The test server has two bugs of its own that
such a core provokes (see `ServerWedges`); an example that hits one is rejected and the rig renewed.

HELPER_PROPERTY_EXAMPLES (default 20) and HELPER_PROPERTY_SEED (default: derandomized, the same examples on
every run) explore further; HELPER_PROPERTY_VERBOSE prints each example's scenario and timeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi import Request
from fastapi.responses import Response
from hypothesis import HealthCheck, example, given, reject, seed, settings
from hypothesis import strategies as st
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.testing import WorkflowEnvironment

from contracts.core_api import Authorization, QuestionChoices, QuestionOption, SessionStatus
from domain.bounds import PAYLOAD_MAX_BYTES, ROW_ACTIONS_MAX, ROW_MESSAGE_MAX
from domain.limits import FollowTuning, Limits
from domain.messages.updates import CloseAnswer
from domain.messages.workflows import HelperResult
from domain.outcome import OutcomeKind
from domain.rows import HelperRow
from domain.work import work_tokens
from protocol.errors import Unavailable
from protocol.names import coordinator_id, helper_workflow_id
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.conftest import TEST_SERVER, register_search_attributes
from tests.fakes.fake_core import CONTROL_NOISE, FOREIGN_OUTCOME, FakeCore, FakeSession, serving_fake_core
from tests.helpers import helper_request, local_activity_name, settings_for
from worker import running_worker

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

CLOSED_PORT = "http://127.0.0.1:9"  # the chat: nobody answers, the outbox backs off
CHECK_MS = 400
LIMITS = Limits(deadline_ms=60_000, grace_ms=30_000)
HARD_S = LIMITS.hard_ceiling_ms / 1000
# A follow attempt watches for 100 ms of real time, then the next one starts 10 s later in server time.
FOLLOW = FollowTuning(poll_ms=50, window_ms=100, resume_ms=10_000, silence_ms=600_000, bad_answers=3)
MAX_RUNNING = 1
SLOW_S = 1.0  # past the 0.4 s call bound, inside recovery's 4 x 0.4 s
EXAMPLES = int(os.environ.get("HELPER_PROPERTY_EXAMPLES", "20"))
SEED = os.environ.get("HELPER_PROPERTY_SEED")
VERBOSE = bool(os.environ.get("HELPER_PROPERTY_VERBOSE"))
# Server time the driver may skip so the helpers complete: the hard ceiling, then the longer of the reset's
# budget (5 min) and the recovery's (3 min), then the settle wait (60 s).
DRAIN_S = 480.0
# Real seconds one example may take before it is abandoned as hung.
EXAMPLE_TIMEOUT_S = 150.0
# How often the driver asks for a close before it takes `unavailable` as the answer.
CLOSE_TRIES = 3

# Exceptions that must never escape a store write or an activity: a malformed answer reached the store,
# or a write broke.
UNEXPECTED = (
    "OverflowError",
    "IntegrityError",
    "DataError",
    "StatementError",
    "ProgrammingError",
    "ValueError",
    "TypeError",
    "ValidationError",
    "KeyError",
    "AttributeError",
    "AssertionError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "PayloadSizeError",
)
FINALIZERS = frozenset({"finalize_outcome"})
STORE_WRITERS = FINALIZERS | {"mark_closed", "coordinator_write", "remove_rows", "park_session"}
WATCHED_LOGGERS = ("activities", "store", "temporalio.activity", "temporalio.worker", "worker", "helper")

ENDINGS = ("completed", "partial", "failed", "question", "authorization", "cancelled", "interrupted")
SNAPSHOT_MISBEHAVIOURS = (
    "html",
    "bad_json",
    "wrong_types",
    "negative",
    "missing",
    "hang",
    "503",
    "500",
    "garbage",
    "oversized_body",
    "lost",
    "wrong_session",
    "overflow",
    "huge_actions",
    "huge_message",
    "nul",
    "too_many_options",
    "duplicate_option_ids",
    "overlong_label",
    "drifting_question_id",
)


# --- the scenario --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Misbehaviour:
    mode: str
    start_s: int
    stop_s: int  # the core answers normally again from here
    wide: bool = False  # finish-now and cancel misbehave too, not only snapshots


@dataclass(frozen=True)
class Scenario:
    """One life of a helper, as the core and the owner shape it; times are seconds after its start."""

    create_delay_s: float = 0.0
    create_fixed_s: int | None = None  # the slow create answers at once from here; None: never
    lose_creates: int = 0  # the next n create answers are lost (the session is made)
    lost_answer: str = "close"
    steps: tuple[tuple[int, int, int], ...] = ()  # (at, input tokens, output tokens)
    misbehaviour: Misbehaviour | None = None
    on_finish: str = "partial"
    finish_delay_s: float = 0.0
    on_cancel: str = "stop"
    cancel_delay_s: float = 0.0
    lose_others: tuple[int, int, int] = (0, 0, 0)  # the next n answers of finish, cancel, reset are lost
    close_s: int | None = None
    end: tuple[int, str] | None = None  # (at, how the session ends)
    reset_fails: bool = False
    second_helper: bool = False  # a second helper of the owner waits for the one running slot

    def events(self) -> list[tuple[float, str, Any]]:
        timeline: list[tuple[float, str, Any]] = [(at, "step", (i, o)) for at, i, o in self.steps]
        if self.create_delay_s and self.create_fixed_s is not None:
            timeline.append((self.create_fixed_s, "create_fixed", None))
        if self.misbehaviour is not None:
            timeline.append((self.misbehaviour.start_s, "misbehave", self.misbehaviour.mode))
            timeline.append((self.misbehaviour.stop_s, "misbehave", None))
        if self.close_s is not None:
            timeline.append((self.close_s, "close", None))
        if self.end is not None:
            timeline.append((self.end[0], "end", self.end[1]))
        order = {"create_fixed": 0, "misbehave": 1, "step": 2, "end": 3, "close": 4}
        return sorted(timeline, key=lambda event: (event[0], order[event[1]]))


# As often before the deadline (60 s) as between it and just past the hard ceiling (90 s).
moments = st.integers(0, 59) | st.integers(60, int(HARD_S) + 8)


@st.composite
def misbehaviours(draw: st.DrawFn) -> Misbehaviour:
    start = draw(moments)
    mode = draw(st.sampled_from(SNAPSHOT_MISBEHAVIOURS))
    return Misbehaviour(mode, start, start + draw(st.integers(2, 40)), wide=draw(st.booleans()))


scenarios = st.builds(
    Scenario,
    create_delay_s=st.sampled_from([0.0, 0.0, SLOW_S]),
    create_fixed_s=st.none() | moments,
    lose_creates=st.integers(0, 3),
    lost_answer=st.sampled_from(["close", "hang"]),
    steps=st.lists(
        st.tuples(moments, st.sampled_from([100, 20_000]), st.sampled_from([50, 5_000, 400_000, 1_200_000])),
        max_size=4,
    ).map(tuple),
    misbehaviour=st.none() | misbehaviours(),
    on_finish=st.sampled_from(["partial", "ignore"]),
    finish_delay_s=st.sampled_from([0.0, 0.0, SLOW_S]),
    on_cancel=st.sampled_from(["stop", "later"]),
    cancel_delay_s=st.sampled_from([0.0, 0.0, SLOW_S]),
    lose_others=st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)),
    close_s=st.none() | moments,
    end=st.none() | st.tuples(moments, st.sampled_from(ENDINGS)),
    reset_fails=st.booleans(),
    second_helper=st.booleans(),
)


# --- the rig: server, fake core and worker on a loop in a thread of their own --------------------------


@dataclass
class WatchedCore(FakeCore):
    """The fake core, counting each owner's running sessions whenever a create makes one (R6, R38).

    A session counts while it is not terminal and the runtime has not let go of it: once the runtime asked
    the core to reset it, a core that keeps it (refusing the reset, R20 parks it) or lies about it is the
    core's doing, not a slot's. Every create that made an owner's count exceed `MAX_RUNNING` is kept.
    """

    reset_asked: set[str] = field(default_factory=set)
    made: dict[str, FakeSession] = field(default_factory=dict)  # every session, reset or not
    most_running: dict[str, int] = field(default_factory=dict)
    over_limit: dict[str, list[list[str]]] = field(default_factory=dict)

    def running(self, owner: str) -> list[str]:
        return sorted(
            s.session_id
            for s in list(self.sessions.values())
            if s.request.owner == owner and not s.status.is_terminal and s.session_id not in self.reset_asked
        )

    def count(self, owner: str) -> None:
        running = self.running(owner)
        self.most_running[owner] = max(self.most_running.get(owner, 0), len(running))
        if len(running) > MAX_RUNNING:
            self.over_limit.setdefault(owner, []).append(running)

    async def _answer(
        self, endpoint: str, session_id: str, request: Request, work: Callable[[bool], Response]
    ) -> Response:
        if endpoint == "reset":
            self.reset_asked.add(session_id)
        if endpoint != "create":
            return await super()._answer(endpoint, session_id, request, work)

        def counted(changing: bool) -> Response:
            response = work(changing)
            self.made.update(self.sessions)
            for owner in {s.request.owner for s in list(self.sessions.values())}:
                self.count(owner)
            return response

        return await super()._answer(endpoint, session_id, request, counted)


class Captured(logging.Handler):
    """Every WARNING+ record of the runtime's own loggers, kept for the example that is running."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @contextlib.contextmanager
    def attached(self) -> Iterator[Captured]:
        loggers = [logging.getLogger(name) for name in WATCHED_LOGGERS]
        for logger in loggers:
            logger.addHandler(self)
        try:
            yield self
        finally:
            for logger in loggers:
                logger.removeHandler(self)


class ServerWedges(logging.Handler):
    """The time-skipping server (the Java test server) fails where the real server does not, in two ways the
    hostile core provokes; an example it spoils says nothing about the runtime, so the rig is renewed and the
    example rejected (every other stuck or slow workflow is a failure):

    - ACTIVITY_UNKNOWN (temporalio/sdk-java#2391): a workflow that cancels an activity in the very task in
      which that activity's completion arrives has its completion refused, and is stuck for ever; the real
      server accepts the cancel (it finds the buffered completion). The Rust core reports it as a warning,
      which this handler counts.
    - time stops skipping: an activity attempt that fails after its cancellation was requested (a slow
      cancel or finish-now call cut by the hard ceiling) is retried by the test server, where the real
      server stops retrying; the helper's bounded settle wait then times out, and a retry scheduled after
      the workflow completed holds the server's time-skipping lock for ever. `Driver.skip_to` sees it:
      sleeps in server time take as long in real time.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "ACTIVITY_UNKNOWN" in message:
            self.count += 1
            self.last = message[:300]


class Wedged(Exception):
    """The time-skipping server's own bug stopped the example (see `ServerWedges`)."""


class Rig:
    """What every example uses: the server, the fake core, the store, the starter's client, the logs."""

    def __init__(
        self,
        env: WorkflowEnvironment,
        core: WatchedCore,
        store: HelperStore,
        client: HelperClient,
        captured: Captured,
        wedges: ServerWedges,
    ) -> None:
        self.env, self.core, self.store, self.client = env, core, store, client
        self.captured, self.wedges = captured, wedges
        self.thread: RigThread | None = None
        self.examples = self.renewals = 0

    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example
        return f"<rig after {self.examples} examples>"

    def run(self, scenario: Scenario) -> Observed:
        assert self.thread is not None
        if not self.thread.run(self.skips(), 30):
            self.renew()  # an earlier example left the server unable to skip (see `ServerWedges`)
        self.examples += 1
        return self.thread.run(Driver(self, scenario, self.examples).run(), EXAMPLE_TIMEOUT_S)

    async def skips(self) -> bool:
        began = time.monotonic()
        await self.env.sleep(timedelta(seconds=3))
        return time.monotonic() - began < 2.0

    def renew(self) -> None:
        """A new server, fake core and worker: after either of its bugs (`ServerWedges`) the time-skipping
        server never skips time again, even once the stuck workflow is terminated."""
        assert self.thread is not None
        self.thread.stop()
        thread = RigThread(self.thread.directory)
        fresh = thread.start()
        self.env, self.core, self.store, self.client = fresh.env, fresh.core, fresh.store, fresh.client
        self.captured, self.wedges, self.thread = fresh.captured, fresh.wedges, thread
        self.renewals += 1


class RigThread:
    """Owns an event loop in a thread: the server, the fake core and the worker start once and serve every
    example; `run` runs one coroutine there and waits for it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="helper-property-rig", daemon=True)
        self._ready: asyncio.Future[Rig] | None = None
        self._stop: asyncio.Event | None = None
        self._main: Any = None

    def start(self) -> Rig:
        self.thread.start()

        async def prepare() -> None:
            self._ready = self.loop.create_future()
            self._stop = asyncio.Event()

        self.run(prepare(), 5)
        self._main = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)

        async def ready() -> Rig:
            assert self._ready is not None
            return await self._ready

        return self.run(ready(), 120)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        if self._main is not None:
            with contextlib.suppress(Exception):
                self._main.result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()

    async def _serve(self) -> None:
        assert self._ready is not None and self._stop is not None
        wedges = ServerWedges()
        core_log = logging.getLogger("tests.helper_property.sdk_core")
        core_log.addHandler(wedges)
        # The Rust core's own warnings reach Python logging, where the test server's known bug shows.
        logs = LoggingConfig(
            filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
            forwarding=LogForwardingConfig(logger=core_log),
        )
        try:
            env = await WorkflowEnvironment.start_time_skipping(
                test_server_existing_path=str(TEST_SERVER),
                data_converter=pydantic_data_converter,
                runtime=Runtime(telemetry=TelemetryConfig(logging=logs)),
            )
        except BaseException as error:
            core_log.removeHandler(wedges)
            self._ready.set_exception(error)
            raise
        try:
            await register_search_attributes(env)
            core = WatchedCore()
            async with serving_fake_core(core) as core_url:
                settings = settings_for(
                    self.directory,
                    core_url,
                    CLOSED_PORT,
                    skipping_time=True,
                    check_ms=CHECK_MS,
                    limits=LIMITS,
                    follow=FOLLOW,
                    max_running=MAX_RUNNING,
                    max_open=3,
                )
                store = await HelperStore.connect(settings.store, run_migrations=True)
                try:
                    async with running_worker(env.client, settings):
                        client = HelperClient(settings, store.reads, env.client)
                        with Captured().attached() as captured:
                            self._ready.set_result(Rig(env, core, store, client, captured, wedges))
                            await self._stop.wait()
                finally:
                    await store.close()
        except BaseException as error:
            if not self._ready.done():
                self._ready.set_exception(error)
            raise
        finally:
            core_log.removeHandler(wedges)
            await env.shutdown()


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    thread = RigThread(tmp_path_factory.mktemp("helper-property"))
    started = thread.start()
    started.thread = thread
    try:
        yield started
    finally:
        assert started.thread is not None
        started.thread.stop()  # the rig's current thread: a renewed rig has another


# --- one example ---------------------------------------------------------------------------------------


def faithful(core: FakeCore) -> None:
    """Every knob back to a faithful core; the sessions of earlier examples stay (other owners)."""
    core.on_finish, core.on_cancel = "partial", "stop"
    core.misbehave, core.misbehave_on, core.reset_fails = None, None, False
    for endpoint in ("create", "snapshot", "finish", "cancel", "reset"):
        setattr(core, f"{endpoint}_delay_s", 0.0)
        setattr(core, f"{endpoint}_lost", False)
    core.lose_next = {}
    core.lost_answer = "close"
    # Hostile sizes past every cap (100 actions, 64,000 characters), but cheap to send many times.
    core.huge_actions_count, core.huge_message_chars = 500, 200_000


def arrange(core: FakeCore, scenario: Scenario) -> None:
    faithful(core)
    core.create_delay_s = scenario.create_delay_s
    counts = (scenario.lose_creates, *scenario.lose_others)
    lost = dict(zip(("create", "finish", "cancel", "reset"), counts, strict=True))
    core.lose_next = {endpoint: n for endpoint, n in lost.items() if n}
    core.lost_answer = scenario.lost_answer
    core.on_finish, core.finish_delay_s = scenario.on_finish, scenario.finish_delay_s
    core.on_cancel, core.cancel_delay_s = scenario.on_cancel, scenario.cancel_delay_s
    core.reset_fails = scenario.reset_fails
    wide = scenario.misbehaviour is not None and scenario.misbehaviour.wide
    # Never on reset: a core that says "no such session" to a reset keeps it running behind the runtime's back.
    core.misbehave_on = {"snapshot", "finish", "cancel"} if wide else {"snapshot"}


def sessions_of(core: FakeCore, owner: str, helper_id: str | None = None) -> list[FakeSession]:
    return [
        s
        for s in list(core.sessions.values())
        if s.request.owner == owner and (helper_id is None or s.request.helper_id == helper_id)
    ]


def end_session(session: FakeSession, how: str) -> None:
    if session.status.is_terminal:
        return
    if how == "question":
        session.question = "Should the venue be within walking distance?"
        session.choices = QuestionChoices(
            question_id="venue", options=[QuestionOption(id="walk", label="Yes"), QuestionOption(id="taxi", label="No")]
        )
        session.status = SessionStatus.QUESTION
    elif how == "authorization":
        session.authorization = Authorization(action="send_mail to carol@example.com", reason="not in the boundary")
        session.status = SessionStatus.AUTHORIZATION
    else:
        session.end(SessionStatus(how), f"{tag(session)} the turn ended {how}")


def tag(session: FakeSession) -> str:
    """Every text a session shows names its helper, so a row showing another helper's text is seen."""
    return f"[{session.request.helper_id}]"


def add_step(session: FakeSession, input_tokens: int, output_tokens: int) -> None:
    session.add_step(input_tokens, output_tokens, f"{tag(session)} step {len(session.steps) + 1} done")


@dataclass
class Observed:
    """What one example saw; the test asserts on it."""

    owner: str
    helpers: list[str]
    rows: dict[str, HelperRow | None] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    results: dict[str, HelperResult] = field(default_factory=dict)
    finalize_markers: dict[str, int] = field(default_factory=dict)
    largest_event: dict[str, int] = field(default_factory=dict)
    tags: set[str] = field(default_factory=set)
    sessions: dict[str, list[FakeSession]] = field(default_factory=dict)
    task_failures: dict[str, list[str]] = field(default_factory=dict)
    outcome_changes: list[str] = field(default_factory=list)
    keys: dict[str, list[str]] = field(default_factory=dict)
    most_running: int = 0
    over_limit: list[list[str]] = field(default_factory=list)
    bad_logs: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    create_calls: int = 0
    wedged: str | None = None
    real_s: float = 0.0
    log: list[str] = field(default_factory=list)


class Samplers:
    """While an example runs: the running sessions of the owner (R6, R38) and each row's outcome (R19)."""

    def __init__(self, rig: Rig, seen: Observed) -> None:
        self.rig, self.seen = rig, seen
        self.first_outcome: dict[str, tuple[Any, ...]] = {}
        self._tasks = [asyncio.create_task(self._sessions()), asyncio.create_task(self._rows())]

    async def _sessions(self) -> None:
        while True:  # the core counts at every create; this also sees a session that only paused
            self.rig.core.count(self.seen.owner)
            await asyncio.sleep(0.005)

    async def _rows(self) -> None:
        while True:
            await self.check_rows()
            await asyncio.sleep(0.05)

    async def check_rows(self) -> None:
        for helper_id in self.seen.helpers:
            row = await self.rig.store.get(self.seen.owner, helper_id)
            if row is None or row.outcome_kind is None:
                continue
            final = (row.outcome_kind, row.finished_at, row.summary)
            first = self.first_outcome.setdefault(helper_id, final)
            if final != first:
                self.seen.outcome_changes.append(f"{helper_id}: {first[:2]} became {final[:2]}")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.check_rows()


class Driver:
    """Walks a scenario's timeline in skipped server time."""

    def __init__(self, rig: Rig, scenario: Scenario, number: int) -> None:
        self.rig, self.scenario = rig, scenario
        self.owner = f"prop{number}"
        self.first, self.second = f"p{number}-a", f"p{number}-b"
        helpers = [self.first, self.second] if scenario.second_helper else [self.first]
        self.seen = Observed(owner=self.owner, helpers=helpers)
        self.started_at: datetime | None = None
        self.wedges_before = rig.wedges.count
        self.slow_chunks = 0

    async def now_s(self) -> float:
        assert self.started_at is not None
        return (await self.rig.env.get_current_time() - self.started_at).total_seconds()

    async def skip_to(self, at_s: float, *, stop_when: Callable[[], Awaitable[bool]] | None = None) -> float:
        """Let server time pass until `at_s` after the start, in chunks; stop early when `stop_when` holds."""
        while True:
            now = await self.now_s()
            if now >= at_s or (stop_when is not None and await stop_when()):
                return now
            chunk = min(5.0, max(at_s - now, 0.05))
            began = time.monotonic()
            sleeping = asyncio.ensure_future(self.rig.env.sleep(timedelta(seconds=chunk)))
            while not sleeping.done():
                await asyncio.wait([sleeping], timeout=0.1)
                if self.rig.wedges.count > self.wedges_before:
                    sleeping.cancel()
                    await asyncio.gather(sleeping, return_exceptions=True)
                    raise Wedged(self.rig.wedges.last)
            sleeping.result()
            if chunk >= 1.0 and time.monotonic() - began >= 0.8 * chunk:
                self.slow_chunks += 1
                if self.slow_chunks >= 2:
                    raise Wedged("the time-skipping server no longer skips time")
            else:
                self.slow_chunks = 0

    async def status(self, helper_id: str) -> WorkflowExecutionStatus | None:
        handle = self.rig.env.client.get_workflow_handle(helper_workflow_id(self.owner, helper_id))
        return (await handle.describe()).status

    async def completed(self, helper_id: str) -> bool:
        return await self.status(helper_id) not in (None, WorkflowExecutionStatus.RUNNING)

    async def all_completed(self) -> bool:
        return all([await self.completed(h) for h in self.seen.helpers])

    async def run(self) -> Observed:
        rig, scenario, core = self.rig, self.scenario, self.rig.core
        began, creates = time.monotonic(), core.create_calls
        arrange(core, scenario)
        rig.captured.records.clear()
        samplers = Samplers(rig, self.seen)
        try:
            await self._drive()
        except Wedged as wedge:
            self.seen.wedged = str(wedge)
        finally:
            await samplers.stop()
            faithful(core)
            await self._collect()
            self.seen.create_calls = core.create_calls - creates
            self.seen.real_s = time.monotonic() - began
        return self.seen

    async def _drive(self) -> None:
        rig, scenario, core = self.rig, self.scenario, self.rig.core
        self.started_at = await rig.env.get_current_time()
        admitted = await rig.client.start(helper_request(self.owner, self.first, task="Find the Q3 report"))
        self.seen.log.append(f"{self.first}: {admitted.status}")
        if scenario.second_helper:
            admitted = await rig.client.start(helper_request(self.owner, self.second, task="Pick a venue"))
            self.seen.log.append(f"{self.second}: {admitted.status}")
        for at_s, kind, value in scenario.events():
            await self.skip_to(at_s, stop_when=lambda: self.completed(self.first))
            if await self.completed(self.first):
                break
            self.seen.log.append(f"{await self.now_s():6.1f} s: {kind} {value}")
            session = next(iter(sessions_of(core, self.owner, self.first)), None)
            match kind:
                case "create_fixed":
                    core.create_delay_s = 0.0
                case "misbehave":
                    core.misbehave = value
                case "step":
                    if session is not None and not session.status.is_terminal:
                        add_step(session, *value)
                case "end":
                    if session is not None:
                        end_session(session, value)
                case "close":
                    answer = await self._close_as_iva_does()
                    self.seen.log.append(f"close answered: {answer.model_dump(mode='json')}")
        # Past the hard ceiling the first helper is final whatever the core does; then let it complete.
        await self.skip_to(HARD_S + 2, stop_when=lambda: self.completed(self.first))
        await self.skip_to(DRAIN_S, stop_when=lambda: self.completed(self.first))
        self.seen.log.append(f"{await self.now_s():6.1f} s: {self.first} ended")
        if scenario.second_helper:
            # The second helper meets a faithful core that ends its session as soon as it exists.
            faithful(core)
            limit = await self.now_s() + DRAIN_S

            async def second_done() -> bool:
                for session in sessions_of(core, self.owner, self.second):
                    end_session(session, "completed")
                return await self.completed(self.second)

            await self.skip_to(limit, stop_when=second_done)
            self.seen.log.append(f"{await self.now_s():6.1f} s: {self.second} ended")

    async def _close_as_iva_does(self) -> CloseAnswer:
        """The close, asked again when it is answered `unavailable` (nothing was taken; asking again is safe). The
        time-skipping test server now and then turns back the task that accepts the update ("invalid history
        builder state for action", then "Already accepted update"), and the close's bound passes meanwhile."""
        for _ in range(CLOSE_TRIES - 1):
            try:
                return await self.rig.client.close(self.owner, self.first)
            except Unavailable as error:
                self.seen.log.append(f"close unavailable, asked again: {error}")
        return await self.rig.client.close(self.owner, self.first)

    async def _collect(self) -> None:
        rig, seen, core = self.rig, self.seen, self.rig.core
        for helper_id in seen.helpers:
            seen.rows[helper_id] = await rig.store.get(self.owner, helper_id)
            workflow_id = helper_workflow_id(self.owner, helper_id)
            handle = rig.env.client.get_workflow_handle(workflow_id)
            status = await self.status(helper_id)
            seen.statuses[helper_id] = status.name if status else "none"
            events = [event async for event in handle.fetch_history_events()]
            if status is WorkflowExecutionStatus.RUNNING:
                seen.log += await self._why_running(handle, events)
                with contextlib.suppress(Exception):
                    await handle.terminate("the property test gave up on it")
            elif status is WorkflowExecutionStatus.COMPLETED:
                seen.results[helper_id] = HelperResult.model_validate(await handle.result())
            seen.finalize_markers[helper_id] = sum(1 for e in events if local_activity_name(e) in FINALIZERS)
            seen.largest_event[helper_id] = max((event.ByteSize() for event in events), default=0)
            seen.sessions[helper_id] = [
                s for s in core.made.values() if s.request.owner == self.owner and s.request.helper_id == helper_id
            ]
            seen.task_failures[helper_id] = _task_failures(events)
            prefix = f"{workflow_id}/"
            seen.keys[helper_id] = [key for key in core.by_key if key.startswith(prefix)]
        coordinator = rig.env.client.get_workflow_handle(coordinator_id(self.owner))
        seen.task_failures["coordinator"] = _task_failures(
            [event async for event in coordinator.fetch_history_events()]
        )
        seen.tags = {tag(session) for session in core.made.values()}
        seen.most_running = core.most_running.get(self.owner, 0)
        seen.over_limit = core.over_limit.get(self.owner, [])
        for record in list(rig.captured.records):
            text = _describe(record)
            if _unexpected(record):
                seen.bad_logs.append(text)
            else:
                seen.warnings.append(text)

    async def _why_running(self, handle: Any, events: list[Any]) -> list[str]:
        """What a helper still running at the end of the drain waits for: its pending activities and its last
        events, in seconds after the example's start."""
        assert self.started_at is not None
        started = self.started_at

        def at(stamp: Any) -> str:
            return f"{(stamp.ToDatetime(tzinfo=started.tzinfo) - started).total_seconds():6.1f} s"

        lines = [f"{await self.now_s():6.1f} s: {handle.id} still running"]
        raw = (await handle.describe()).raw_description
        for pending in raw.pending_activities:
            lines.append(
                f"  pending {pending.activity_type.name}: attempt {pending.attempt}, state {pending.state}, "
                f"scheduled {at(pending.scheduled_time)}, last failure {pending.last_failure.message[:120]!r}"
            )
        for event in events[-15:]:
            lines.append(f"  {at(event.event_time)} event {event.event_id} {EventType.Name(event.event_type)}")
        return lines


def _task_failures(events: list[Any]) -> list[str]:
    return [
        f"{event.event_id}: {event.workflow_task_failed_event_attributes.failure.message}"
        for event in events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


def _exception_chain(record: logging.LogRecord) -> list[BaseException]:
    chain: list[BaseException] = []
    error = record.exc_info[1] if record.exc_info else None
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _describe(record: logging.LogRecord) -> str:
    chain = " <- ".join(f"{type(e).__name__}: {str(e)[:200]}" for e in _exception_chain(record))
    activity = getattr(record, "temporal_activity", None) or {}
    kind = activity.get("activity_type") if isinstance(activity, dict) else None
    return f"{record.levelname} {record.name} [{kind or '-'}] {record.getMessage()[:300]}" + (
        f" | {chain}" if chain else ""
    )


def _unexpected(record: logging.LogRecord) -> bool:
    chain = _exception_chain(record)
    names = {type(error).__name__ for error in chain} | {
        base.__name__ for error in chain for base in type(error).__mro__
    }
    text = record.getMessage() + " ".join(str(error) for error in chain)
    if names & set(UNEXPECTED) or any(name in text for name in UNEXPECTED):
        return True
    activity = getattr(record, "temporal_activity", None) or {}
    kind = activity.get("activity_type") if isinstance(activity, dict) else None
    # A store write that fails at all is a finalization (or a close) at risk.
    return kind in STORE_WRITERS and bool(chain)


# --- the property ---------------------------------------------------------------------------------------


def _check(scenario: Scenario, seen: Observed) -> None:
    story = "\n  ".join(seen.log)
    context = f"\nscenario: {scenario}\ntimeline:\n  {story}\nwarnings: {seen.warnings[:10]}"
    problems: list[str] = []
    for helper_id in seen.helpers:
        row = seen.rows[helper_id]
        # 1. exactly one finalization, and the workflow's result is the row's kind (R19).
        if row is None or row.outcome_kind is None:
            problems.append(f"{helper_id}: no outcome in the row ({row.state if row else 'no row'})")
            continue
        # A failed outcome fails the workflow (the Web UI shows it red); every other outcome completes it.
        status = "FAILED" if row.outcome_kind is OutcomeKind.FAILED else "COMPLETED"
        if seen.statuses[helper_id] != status:
            problems.append(f"{helper_id}: the workflow is {seen.statuses[helper_id]}, not {status.lower()}")
        elif status == "COMPLETED" and seen.results[helper_id].outcome is not row.outcome_kind:
            problems.append(f"{helper_id}: result {seen.results[helper_id]!r} but the row says {row.outcome_kind}")
        if seen.finalize_markers[helper_id] != 1:
            problems.append(f"{helper_id}: {seen.finalize_markers[helper_id]} finalizer markers")
        # 2. final no later than the hard ceiling plus one check interval after the start (R35).
        if row.started_at is not None:
            assert row.finished_at is not None
            took = row.finished_at - row.started_at
            bound = timedelta(milliseconds=LIMITS.hard_ceiling_ms + CHECK_MS)
            if took > bound:
                problems.append(f"{helper_id}: final {took.total_seconds():.1f} s after its start (bound {bound})")
        # 6. nothing unbounded crossed Temporal (R36), nothing malformed or foreign reached the row (R37).
        problems += _bounded_and_clean(helper_id, row, seen)
        # 3. one key, so one session, per helper (R9, R38).
        if len(seen.keys[helper_id]) > 1:
            problems.append(f"{helper_id}: {len(seen.keys[helper_id])} idempotency keys {seen.keys[helper_id]}")
    problems += [f"outcome changed: {change}" for change in seen.outcome_changes]
    # 3. never more running sessions than slots (R6, R38).
    if seen.over_limit:
        problems.append(f"{seen.most_running} sessions ran at once with {MAX_RUNNING} slot: {seen.over_limit[0]}")
    # 4. no store write failed, nothing malformed reached the store (R37).
    problems += [f"unexpected log: {text}" for text in seen.bad_logs]
    # 5. no workflow-task failure.
    for name, failures in seen.task_failures.items():
        problems += [f"{name}: workflow task failed: {failure}" for failure in failures]
    assert not problems, "\n".join(problems) + context


def _bounded_and_clean(helper_id: str, row: HelperRow, seen: Observed) -> list[str]:
    problems = []
    if seen.largest_event[helper_id] >= PAYLOAD_MAX_BYTES:
        problems.append(f"{helper_id}: a history event of {seen.largest_event[helper_id]} bytes")
    texts = [row.summary or "", row.last_message, *(f"{a.tool} {a.whom} {a.what}" for a in row.actions)]
    if any(ch in text for text in texts for ch in CONTROL_NOISE):
        problems.append(f"{helper_id}: control characters in the row")
    # "wrong_session" answers with another session's snapshot, of this owner or any earlier example's.
    foreign = [t for t in seen.tags if t != f"[{helper_id}]" and t in " ".join(texts)]
    if foreign or FOREIGN_OUTCOME in " ".join(texts):
        problems.append(f"{helper_id}: another session's text in the row: {row.summary!r}")
    true_work = max((work_tokens(s.steps) for s in seen.sessions[helper_id]), default=0)
    if row.work_tokens > true_work:
        problems.append(f"{helper_id}: {row.work_tokens} work tokens in the row, its session did {true_work}")
    if len(row.actions) > ROW_ACTIONS_MAX or len(row.last_message) > ROW_MESSAGE_MAX:
        problems.append(f"{helper_id}: {len(row.actions)} actions, a message of {len(row.last_message)} in the row")
    return problems


def _seeded(test: F) -> F:
    """HELPER_PROPERTY_SEED explores other examples; without it every run tries the same ones."""
    return seed(int(SEED))(test) if SEED is not None else test


@_seeded
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=SEED is None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenario=scenarios)
# Found by this test: every create answered after the call bound, the core stops a turn only later, and
# one cancel answer is lost. The recovery parked the session after that one cancel, without a reset or a
# retry, and the slot passed on while it still ran: two running sessions with one slot (R38).
@example(scenario=Scenario(create_delay_s=SLOW_S, on_cancel="later", lose_others=(0, 1, 0), second_helper=True))
def test_a_helper_keeps_its_promises_whatever_the_core_does(rig: Rig, scenario: Scenario) -> None:
    """R35, R36, R37, R38 (and R6, R9, R19, R20): one outcome, final by the hard ceiling plus one check
    interval, one session per helper, no more running sessions than slots, no failed store write, no
    workflow-task failure, for any generated sequence of core behaviours and events."""
    seen = rig.run(scenario)
    if seen.wedged:
        print(f"example {rig.examples} rejected: the time-skipping server failed ({seen.wedged})\n  {scenario}")
        rig.renew()
        reject()
    print(
        f"example {rig.examples}: {seen.real_s:.1f} s real, outcomes "
        f"{ {h: (r.outcome_kind.value if r and r.outcome_kind else None) for h, r in seen.rows.items()} }, "
        f"most running {seen.most_running}, {len(seen.warnings)} warnings, {seen.create_calls} creates"
        f"{f', rig renewed {rig.renewals} times' if rig.renewals else ''}"
    )
    if VERBOSE:
        print("  " + "\n  ".join([repr(scenario), *seen.log, *seen.warnings]))
    _check(scenario, seen)
