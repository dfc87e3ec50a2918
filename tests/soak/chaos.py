"""The chaos soak's machinery: the starter run as Iva runs it, owners that behave like Iva, a seeded fault
schedule against the stack's processes, a sampler of running sessions, and the checks after the drain.

Everything here is bounded: every loop has a count and a time limit, every subprocess a timeout, and every
address is loopback. `test_chaos.py` wires it together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus

from reference.core.script import scripted_task
from tests.soak.postgres_server import PostgresServer
from tools.demo.stack import BIN, HOST, Stack, StackError
from tools.demo.stack import wait_for_http as stack_wait_for_http

STARTER = BIN / "helper-starter"
# The starter's exit codes (its contract, docs/api.md): 4 is a write Temporal accepted whose answer did not come
# within the bound, 5 a write refused before anything was sent; both are answers, and asking again is safe.
DONE, REFUSED, INVALID, UNAVAILABLE, ACCEPTED, BUSY = 0, 1, 2, 3, 4, 5
ASK_AGAIN = (UNAVAILABLE, ACCEPTED, BUSY)
# Core session statuses the owner has going: sampled and reported. Only `running` is limited (R38): a
# question or authorization session is paused, and its reset (R20) follows the slot hand-off.
ACTIVE_STATUSES = ("running", "question", "authorization")
MAX_RUNNING = 3
# A replica stopped with SIGTERM must exit within this (Kubernetes' terminationGracePeriodSeconds).
TERMINATION_GRACE_S = 30.0


class Clock:
    """Seconds since the soak began; every deadline of the harness is on this clock."""

    def __init__(self) -> None:
        self.origin = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.origin

    async def sleep_until(self, moment: float) -> None:
        delay = moment - self()
        if delay > 0:
            await asyncio.sleep(delay)


class Journal:
    """What happened when, kept for the evidence and written next to the stack's logs."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.lines: list[str] = []

    def note(self, text: str) -> None:
        self.lines.append(f"{self.clock():7.2f}  {text}")

    def write(self, path: Path) -> None:
        path.write_text("\n".join(self.lines) + "\n", encoding="utf-8")


# --- the starter, as a subprocess -------------------------------------------------------------------------


@dataclass
class Answer:
    command: str
    code: int
    output: Any
    stderr: str
    seconds: float
    stdout: str = ""

    @property
    def error_code(self) -> str | None:
        for key in ("error", "pending"):
            if isinstance(self.output, dict) and isinstance(self.output.get(key), dict):
                return str(self.output[key].get("code"))
        return None

    @property
    def ok(self) -> bool:
        return self.code == DONE and isinstance(self.output, dict | list)

    @property
    def abnormal(self) -> bool:
        """No JSON object on stdout, or an exit code outside the contract: a crash, not an answer."""
        return self.code not in (DONE, REFUSED, INVALID, *ASK_AGAIN) or not isinstance(self.output, dict | list)

    @property
    def retry_after_s(self) -> float | None:
        if self.code in ASK_AGAIN and isinstance(self.output, dict) and isinstance(self.output.get("error"), dict):
            value = self.output["error"].get("retry_after_s")
            return float(value) if isinstance(value, int | float) else None
        return None


def _parse(stdout: str) -> tuple[Any, list[str]]:
    """The JSON answer and any lines printed before it (the contract says there are none)."""
    try:
        return json.loads(stdout), []
    except json.JSONDecodeError:
        pass
    lines = stdout.splitlines()
    for index, line in enumerate(lines):
        if line.startswith(("{", "[")):
            try:
                return json.loads("\n".join(lines[index:])), [x for x in lines[:index] if x.strip()]
            except json.JSONDecodeError:
                break
    return None, []


class Starter:
    """`helper-starter` as Iva calls it: one process per call, the stack's environment, one JSON object out."""

    def __init__(
        self, env: dict[str, str], journal: Journal, *, starts: int = 6, others: int = 4, timeout: float = 40.0
    ) -> None:
        self.env = env
        self.journal = journal
        self.timeout = timeout
        # Starts wait long while a coordinator is stalled; they get their own processes so that closes, reads
        # and deliveries are not starved behind them (at most ten starter processes at once on two cores).
        self._start_slots, self._other_slots = asyncio.Semaphore(starts), asyncio.Semaphore(others)
        self.exits: Counter[tuple[str, int]] = Counter()
        self.abnormal: list[str] = []
        self.durations: list[float] = []
        self._processes: dict[int, asyncio.subprocess.Process] = {}

    async def run(self, *arguments: str) -> Answer:
        command = arguments[0]
        async with self._start_slots if command == "start" else self._other_slots:
            began = time.monotonic()
            process = await asyncio.create_subprocess_exec(
                str(STARTER),
                *arguments,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            self._processes[process.pid] = process
            try:
                async with asyncio.timeout(self.timeout):
                    stdout, stderr = await process.communicate()
                code = process.returncode if process.returncode is not None else -1
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):  # it may end on its own meanwhile
                    process.kill()
                await process.wait()
                stdout, stderr, code = b"", f"harness: no exit within {self.timeout:.0f} s".encode(), -9
            finally:
                self._processes.pop(process.pid, None)
        output, noise = _parse(stdout.decode("utf-8", "replace"))
        answer = Answer(
            command,
            code,
            output,
            stderr.decode("utf-8", "replace")[-4000:],
            time.monotonic() - began,
            stdout.decode("utf-8", "replace")[-2000:],
        )
        self.exits[(command, code)] += 1
        self.durations.append(answer.seconds)
        call = " ".join(arguments[:5])
        if noise and not answer.abnormal:
            # The answer is there, after other lines: Iva's parser of "one JSON object" would fail on it.
            self.abnormal.append(f"{call}: exit {code}, stdout is not one JSON object; before it: {noise[0][:200]}")
            self.journal.note(f"NOISY STDOUT {call}: exit {code}; {len(noise)} line(s) before the JSON: {noise}")
        if answer.abnormal:
            last = answer.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
            self.abnormal.append(
                f"{call}: exit {code} after {answer.seconds:.1f} s, no JSON answer; last line: {last[0]}"
            )
            self.journal.note(
                f"ABNORMAL {call}: exit {code} after {answer.seconds:.1f} s;"
                f" stdout:\n{answer.stdout}\nstderr:\n{answer.stderr}"
            )
        elif answer.seconds > 5:
            self.journal.note(f"slow {call}: exit {code} after {answer.seconds:.1f} s")
        return answer

    def kill_all(self) -> None:
        """Kill the starter processes this harness started and that still run (by their own handles)."""
        for process in list(self._processes.values()):
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):  # ended, not yet reaped
                    process.kill()


# --- owners that behave like Iva -------------------------------------------------------------------------


ENDINGS: list[tuple[str, int]] = [
    ("complete", 40),
    ("question", 12),
    ("authorization", 10),
    ("fail", 10),
    ("run", 20),  # runs until the deadline asks for finish-now: partial
    ("hang", 8),  # goes silent, ignores finish-now: partial at the hard ceiling
]


@dataclass(frozen=True)
class HelperSpec:
    owner: str
    helper_id: str
    ending: str
    task: str


def plan_helpers(rng: random.Random, owner: str, count: int) -> list[HelperSpec]:
    names, weights = zip(*ENDINGS, strict=True)
    specs = []
    for number in range(1, count + 1):
        ending = rng.choices(names, weights)[0]
        helper_id = f"h{number:02d}-{ending}"
        title = f"Soak task {number} of {owner} ({ending})."
        match ending:
            case "complete":
                task = scripted_task(title, steps=rng.randint(3, 12), step_ms=rng.choice([300, 600, 900]))
            case "question":
                task = scripted_task(title, steps=rng.randint(1, 4), step_ms=300, end="question", question="Which one?")
            case "authorization":
                task = scripted_task(
                    title, steps=rng.randint(1, 3), step_ms=300, end="authorization", authorization="mail bob"
                )
            case "fail":
                task = scripted_task(title, steps=rng.randint(1, 4), step_ms=300, end="fail", error="scripted failure")
            case "run":
                task = scripted_task(title, steps=80, step_ms=700, end="run")
            case _:
                task = scripted_task(title, steps=2, step_ms=300, end="hang")
        specs.append(HelperSpec(owner, helper_id, ending, task))
    return specs


@dataclass
class HelperRecord:
    spec: HelperSpec
    attempts: list[str] = field(default_factory=list)  # "exit/code" per attempt
    admitted: bool = False  # a start answered exit 0
    admitted_at: float | None = None
    existing_on_first_answer: bool = False
    first_answer: dict[str, Any] | None = None  # the exit-0 admission answer: status, ahead, existing
    refused: str | None = None
    unanswered: bool = False  # gave up while the answer was "unavailable": it may be admitted anyway
    close_attempted: bool = False
    close_answers: list[dict[str, Any]] = field(default_factory=list)
    read_by: list[str] = field(default_factory=list)  # turns that read it (exit 0)
    delivered: bool = False  # a delivered answer named it


class Owner:
    """One owner's Iva: starts helpers, closes some, reads and delivers outcomes; retries while unavailable."""

    def __init__(
        self, name: str, specs: list[HelperSpec], rng: random.Random, starter: Starter, journal: Journal, clock: Clock
    ) -> None:
        self.name = name
        self.specs = specs
        self.rng = rng
        self.starter = starter
        self.journal = journal
        self.clock = clock
        self.records = {spec.helper_id: HelperRecord(spec) for spec in specs}
        self.turns = 0

    async def drive(self, *, starts_until: float, acts_until: float, answers_until: float, lanes: int = 3) -> None:
        """As Iva does: helpers are started (up to three at a time) while chat turns read and deliver outcomes
        and the owner now and then closes one."""
        await asyncio.gather(
            *(
                self._starting(self.specs[lane::lanes], starts_until=starts_until, answers_until=answers_until)
                for lane in range(lanes)
            ),
            self._answering(acts_until=acts_until, answers_until=answers_until),
            self._closing(acts_until=acts_until),
        )

    async def _starting(self, specs: list[HelperSpec], *, starts_until: float, answers_until: float) -> None:
        for spec in specs:
            if self.clock() > starts_until:
                break
            await self._start(spec, starts_until=starts_until, answers_until=answers_until)
            await asyncio.sleep(self.rng.uniform(0.3, 1.5))

    async def _answering(self, *, acts_until: float, answers_until: float) -> None:
        for _ in range(100):
            if self.clock() > acts_until:
                break
            await asyncio.sleep(self.rng.uniform(1.5, 3.5))
            await self._read_and_deliver(answers_until)

    async def _closing(self, *, acts_until: float) -> None:
        for _ in range(30):
            await asyncio.sleep(self.rng.uniform(8.0, 16.0))
            if self.clock() > acts_until:
                break
            await self._close_one()

    async def call(self, answers_until: float, *arguments: str, tries: list[str] | None = None) -> Answer:
        """One starter command, asked again (up to 40 times) while the runtime is unavailable, busy or has not
        answered an accepted write yet, or the command gave no answer; every answer's "exit/error code" is
        appended to `tries`."""
        pause = 0.5
        answer = await self.starter.run(*arguments)
        for _ in range(40):
            if tries is not None:
                tries.append(f"{answer.code}/{'abnormal' if answer.abnormal else answer.error_code or '-'}")
            if not (answer.code in ASK_AGAIN or answer.abnormal) or self.clock() > answers_until:
                break
            await asyncio.sleep(answer.retry_after_s if answer.retry_after_s is not None else pause)
            pause = min(pause * 1.5, 3.0)
            answer = await self.starter.run(*arguments)
        return answer

    async def _start(self, spec: HelperSpec, *, starts_until: float, answers_until: float) -> None:
        record = self.records[spec.helper_id]
        arguments = ("start", "--owner", self.name, "--id", spec.helper_id, "--model", "scripted", "--task", spec.task)
        for _ in range(60):
            answer = await self.call(answers_until, *arguments, tries=record.attempts)
            if answer.ok:
                record.admitted, record.admitted_at = True, self.clock()
                record.first_answer = {k: answer.output.get(k) for k in ("status", "ahead", "existing")}
                record.existing_on_first_answer = bool(answer.output.get("existing")) and len(record.attempts) == 1
                self.journal.note(f"{self.name}/{spec.helper_id} admitted: {answer.output.get('status')}")
                return
            if answer.code == REFUSED and answer.error_code == "too_many_open" and self.clock() < starts_until:
                await asyncio.sleep(self.rng.uniform(1.5, 3.0))
                continue
            if answer.code in (REFUSED, INVALID) and not answer.abnormal:
                record.refused = f"exit {answer.code}: {answer.output}"
                self.journal.note(f"{self.name}/{spec.helper_id} refused: {answer.error_code}")
                return
            record.unanswered = True  # unavailable or no answer at all: it may have been admitted anyway
            self.journal.note(f"{self.name}/{spec.helper_id} gave up unanswered (exit {answer.code})")
            return
        record.refused = "still too many open after 60 tries"

    async def _close_one(self) -> None:
        candidates = [r for r in self.records.values() if r.admitted and not r.close_attempted]
        if not candidates:
            return
        # Half the time the newest helper (likely still running: its slot must stay held until the core
        # confirms the stop), otherwise any (a delivered one is removed, an unreported one withdrawn).
        newest = max(candidates, key=lambda r: r.admitted_at or 0.0)
        record = newest if self.rng.random() < 0.5 else self.rng.choice(candidates)
        record.close_attempted = True
        answer = await self.call(self.clock() + 40, "close", "--owner", self.name, "--id", record.spec.helper_id)
        if answer.ok:
            record.close_answers.append(answer.output)
        self.journal.note(f"{self.name}/{record.spec.helper_id} close: exit {answer.code} {answer.output}")

    async def _read_and_deliver(self, answers_until: float) -> None:
        listed = await self.call(answers_until, "unreported", "--owner", self.name)
        if not listed.ok or not isinstance(listed.output, list) or not listed.output:
            return
        ids = [view["helper_id"] for view in listed.output][: self.rng.randint(1, 2)]
        self.turns += 1
        turn = f"t-{self.name}-{self.turns}"
        read = await self.call(answers_until, "read", "--owner", self.name, "--turn", turn, *ids)
        self.journal.note(f"{self.name} read {ids} in {turn}: exit {read.code} {read.error_code or ''}")
        if not read.ok:
            return
        for helper_id in read.output.get("read", []):
            if helper_id in self.records:
                self.records[helper_id].read_by.append(turn)
        answer = await self.call(
            answers_until, "delivered", "--owner", self.name, "--turn", turn, "--answer-chars", "120"
        )
        self.journal.note(f"{self.name} delivered in {turn}: exit {answer.code} {answer.output}")
        if answer.ok:
            for helper_id in answer.output.get("delivered", []):
                if helper_id in self.records:
                    self.records[helper_id].delivered = True


# --- faults ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    at: float  # seconds on the soak clock
    kind: str  # worker | rolling | temporal | postgres | core | chat
    down: float  # seconds the process stays down


# Seconds each kind of process stays down. A rolling restart stops the replicas one by one with SIGTERM and
# starts each again at once, as Kubernetes rolls a Deployment.
DOWNTIME = {
    "worker": (0.5, 3.0),
    "temporal": (1.0, 3.0),
    "core": (0.0, 1.5),
    "postgres": (1.0, 4.0),
    "rolling": (0.0, 0.0),
    "chat": (12.0, 20.0),
}


def plan_faults(rng: random.Random, begin: float, end: float, counts: dict[str, int]) -> list[Fault]:
    """`counts` faults of each kind, one at a time in a seeded order; the chat's outage overlaps them (it blocks
    no write)."""
    kinds = [kind for kind, count in counts.items() for _ in range(count)]
    rng.shuffle(kinds)
    step = (end - begin) / len(kinds)
    schedule = [
        Fault(
            at=round(begin + index * step + rng.uniform(0, step * 0.4), 2),
            kind=kind,
            down=round(rng.uniform(*DOWNTIME[kind]), 2),
        )
        for index, kind in enumerate(kinds)
    ]
    chat = Fault(
        at=round(rng.uniform(begin + 10, end - 30), 2), kind="chat", down=round(rng.uniform(*DOWNTIME["chat"]), 2)
    )
    return sorted([*schedule, chat], key=lambda fault: fault.at)


@dataclass
class InjectedFault:
    kind: str
    at: float
    down: float
    back: float  # seconds from the kill until the process answered again
    aimed: bool = False  # a worker kill timed right after an admission wrote its row


class Injector:
    """Runs the fault schedule against the stack, one fault at a time, and waits for each process to answer."""

    def __init__(
        self,
        stack: Stack,
        journal: Journal,
        clock: Clock,
        tables: StoreTables,
        rng: random.Random,
        postgres: PostgresServer | None = None,
    ) -> None:
        self.stack = stack
        self.tables = tables
        self.journal = journal
        self.clock = clock
        self.rng = rng
        self.postgres = postgres
        self.injected: list[InjectedFault] = []
        self.stops: list[tuple[str, float, bool]] = []  # replica, seconds from SIGTERM to exit, exited by itself

    async def run(self, schedule: list[Fault], *, not_after: float) -> None:
        """The chat's outage runs beside the others; the other faults one after another."""
        outages = [asyncio.create_task(self._at(fault, not_after)) for fault in schedule if fault.kind == "chat"]
        try:
            for fault in schedule:
                if fault.kind != "chat":
                    await self._at(fault, not_after)
            await asyncio.gather(*outages)
        finally:
            for outage in outages:
                outage.cancel()
            await asyncio.gather(*outages, return_exceptions=True)

    async def _at(self, fault: Fault, not_after: float) -> None:
        await self.clock.sleep_until(fault.at)
        if self.clock() > not_after:
            self.journal.note(f"fault {fault.kind} skipped: past the fault window")
            return
        await self.inject(fault)

    def _health_url(self, name: str) -> str:
        return f"http://{HOST}:{self.stack.worker_health_ports[self.stack.worker_names.index(name)]}/livez"

    async def inject(self, fault: Fault) -> None:
        killed_at = self.clock()
        aimed = False
        if fault.kind == "rolling":
            name = "every worker replica"
            await self._rolling_restart()
        elif fault.kind == "postgres":
            name = "postgres"
            assert self.postgres is not None, "a postgres fault needs the soak's own PostgreSQL server"
            await self.postgres.stop("immediate")
            self.journal.note(f"fault: PostgreSQL stopped at once (down {fault.down:.1f} s)")
            await asyncio.sleep(fault.down)
            await self.postgres.start()
        else:
            if fault.kind == "worker":
                aimed = await self._aim_at_admission()
                name = self.rng.choice(self.stack.worker_names)
            else:
                name = {"core": "reference-core", "chat": "reference-chat"}.get(fault.kind, fault.kind)
            self.stack.kill(name)
            self.journal.note(
                f"fault: SIGKILL {name} (down {fault.down:.1f} s{', aimed at an admission' if aimed else ''})"
            )
            await asyncio.sleep(fault.down)
            await self.stack.respawn(name)  # waits for Temporal itself; the others below
            if fault.kind == "worker":
                await wait_for_http(self.stack, self._health_url(name), timeout=60)
            elif fault.kind == "core":
                await wait_for_http(self.stack, f"http://{HOST}:{self.stack.ports.core}/healthz", timeout=30)
            elif fault.kind == "chat":
                await wait_for_http(self.stack, f"http://{HOST}:{self.stack.ports.chat}/healthz", timeout=30)
        back = self.clock() - killed_at
        self.injected.append(InjectedFault(fault.kind, round(killed_at, 1), fault.down, round(back, 1), aimed))
        self.journal.note(f"fault: {name} answers again after {back:.1f} s")

    async def _rolling_restart(self) -> None:
        for name in self.stack.worker_names:
            process = dict(self.stack.processes)[name]
            seconds = await self.stack.terminate(name, TERMINATION_GRACE_S)
            by_itself = process.returncode == 0
            self.stops.append((name, round(seconds, 1), by_itself))
            self.journal.note(
                f"rolling restart: {name} exited {'by itself' if by_itself else 'only to SIGKILL'} "
                f"{seconds:.1f} s after SIGTERM"
            )
            await self.stack.respawn(name)
            await wait_for_http(self.stack, self._health_url(name), timeout=60)

    async def _aim_at_admission(self, polls: int = 800) -> bool:
        """Wait (up to about 8 s) for an admission's row to appear: the coordinator's workflow task is then
        between the row write and its completion, the moment a killed worker could run a helper twice."""
        query = "SELECT owner, helper_id, seq FROM helper_rows"
        try:
            seen = set(await self.tables.fetch(query))
        except StoreUnreadable:
            return False
        for _ in range(polls):
            await asyncio.sleep(0.01)
            try:
                now = set(await self.tables.fetch(query))
            except StoreUnreadable:
                continue
            if now - seen:
                self.journal.note(f"aiming: new admission row {sorted(now - seen)}")
                return True
            seen = now
        return False


async def wait_for_http(stack: Stack, url: str, timeout: float) -> None:
    try:
        await stack_wait_for_http(url, url, stack, timeout)
    except StackError as error:
        raise AssertionError(f"harness: {error}") from None


# --- the store, read directly -----------------------------------------------------------------------------


class StoreUnreadable(Exception):
    """The store did not answer a probe (it is being restarted, or busy)."""


class StoreTables:
    """The store's tables read with the bare driver, never through the product's code: a SQLite file or a
    PostgreSQL database (one connection, opened again after the server restarts)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sqlite_path = url.split(":///", 1)[1] if url.startswith("sqlite") else None
        self._connection: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()

    async def fetch(self, query: str, timeout: float = 5.0) -> list[tuple[Any, ...]]:
        if self.sqlite_path is not None:
            try:
                with contextlib.closing(sqlite3.connect(self.sqlite_path, timeout=0.5, isolation_level=None)) as db:
                    return list(db.execute(query).fetchall())
            except sqlite3.Error as error:
                raise StoreUnreadable(str(error)) from error
        async with self._lock:
            try:
                if self._connection is None:
                    dsn = self.url.replace("postgresql+asyncpg://", "postgresql://", 1)
                    self._connection = await asyncpg.connect(dsn, timeout=timeout)
                return [tuple(record) for record in await self._connection.fetch(query, timeout=timeout)]
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
                await self.close()
                raise StoreUnreadable(repr(error)) from error

    async def close(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            connection.terminate()


# --- sampling running sessions ---------------------------------------------------------------------------


@dataclass
class Peak:
    count: int = 0
    at: float = 0.0
    who: list[str] = field(default_factory=list)


class Sampler:
    """Every 100 ms: the core's sessions going on per owner, and the store's running rows per owner."""

    def __init__(
        self, core_db: Path, tables: StoreTables, clock: Clock, interval: float = 0.1, limit: int = 6_000
    ) -> None:
        self.core_db, self.tables, self.clock = core_db, tables, clock
        self.interval, self.limit = interval, limit
        self.samples = 0
        self.failed_samples = 0
        self.core_active: dict[str, Peak] = {}  # running/question/authorization
        self.core_running: dict[str, Peak] = {}  # running only (R38)
        self.store_running: dict[str, Peak] = {}
        self.over_running: list[str] = []  # samples with more than the limit running, first 30
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        core = sqlite3.connect(self.core_db, timeout=0.5, isolation_level=None)
        try:
            for _ in range(self.limit):
                try:
                    now = self.clock()
                    sessions = core.execute(
                        "SELECT owner, helper_id, status FROM sessions WHERE reset_at IS NULL AND status IN (?, ?, ?)",
                        ACTIVE_STATUSES,
                    ).fetchall()
                    rows = await self.tables.fetch("SELECT owner, helper_id FROM helper_rows WHERE state = 'running'")
                    self.sample(now, sessions, rows)
                except (sqlite3.Error, StoreUnreadable):
                    self.failed_samples += 1
                await asyncio.sleep(self.interval)
        finally:
            core.close()

    def sample(self, now: float, sessions: list[tuple[Any, ...]], rows: list[tuple[Any, ...]]) -> None:
        self.samples += 1
        active: dict[str, list[str]] = {}
        running: dict[str, list[str]] = {}
        for owner, helper_id, status in sessions:
            active.setdefault(owner, []).append(f"{helper_id}:{status}")
            if status == "running":
                running.setdefault(owner, []).append(helper_id)
        in_store: dict[str, list[str]] = {}
        for owner, helper_id in rows:
            in_store.setdefault(owner, []).append(helper_id)
        for peaks, seen, label in (
            (self.core_active, active, "core sessions going"),
            (self.core_running, running, "core sessions running"),
            (self.store_running, in_store, "store rows running"),
        ):
            for owner, who in seen.items():
                peak = peaks.setdefault(owner, Peak())
                if len(who) > peak.count:
                    peak.count, peak.at, peak.who = len(who), round(now, 2), sorted(who)
                if peaks is not self.core_active and len(who) > MAX_RUNNING and len(self.over_running) < 30:
                    self.over_running.append(f"t={now:.2f} {owner}: {len(who)} {label}: {sorted(who)}")


# --- reading the evidence after the drain ----------------------------------------------------------------


@dataclass
class StoreRow:
    owner: str
    helper_id: str
    seq: int
    state: str
    outcome_kind: str | None
    result_dir: str


async def store_rows(tables: StoreTables) -> dict[tuple[str, str], StoreRow]:
    found = await tables.fetch("SELECT owner, helper_id, seq, state, outcome_kind, result_dir FROM helper_rows")
    return {(r[0], r[1]): StoreRow(*r) for r in found}


@dataclass
class StoreEvidence:
    rows: dict[tuple[str, str], StoreRow]
    usage: Counter[tuple[str, str]]  # usage records per helper: one per finalization
    outcomes: Counter[str]  # usage records per outcome kind


async def store_evidence(tables: StoreTables) -> StoreEvidence:
    usage = await tables.fetch("SELECT owner, helper_id, outcome_kind FROM helper_usage")
    return StoreEvidence(
        await store_rows(tables), Counter((r[0], r[1]) for r in usage), Counter(str(r[2]) for r in usage)
    )


def core_sessions(core_db: Path) -> dict[tuple[str, str, str], list[tuple[str, str | None, bool]]]:
    """Sessions per (owner, helper id, key prefix): the key is `<workflow id>/<first run id>`."""
    with sqlite3.connect(core_db, timeout=5) as db:
        found = db.execute(
            "SELECT owner, helper_id, idempotency_key, session_id, status, reset_at IS NOT NULL FROM sessions"
        ).fetchall()
    sessions: dict[tuple[str, str, str], list[tuple[str, str | None, bool]]] = {}
    for owner, helper_id, key, session_id, status, reset in found:
        prefix = str(key).rsplit("/", 1)[0]
        sessions.setdefault((owner, helper_id, prefix), []).append((session_id, status, bool(reset)))
    return sessions


def orphan_directories(results: Path, rows: dict[tuple[str, str], StoreRow]) -> list[str]:
    known = {Path(row.result_dir).resolve() for row in rows.values()}
    if not results.exists():
        return []
    return sorted(
        str(directory.relative_to(results))
        for owner in results.iterdir()
        if owner.is_dir()
        for directory in owner.iterdir()
        if directory.is_dir() and directory.resolve() not in known
    )


@dataclass
class TemporalEvidence:
    helper_runs: dict[str, list[str]] = field(default_factory=dict)  # workflow id -> run ids
    helper_results: dict[str, list[str]] = field(default_factory=dict)  # workflow id -> "run:outcome" per run
    running_helpers: list[str] = field(default_factory=list)
    task_failures: list[str] = field(default_factory=list)  # one line per WorkflowTaskFailed event
    failure_causes: Counter[str] = field(default_factory=Counter)
    task_timeouts: int = 0
    workflows: int = 0


# The server turns back a task that completes the run while a new event (a close, a slot) came in, and the
# worker decides again with it: Temporal's normal way, counted but not a failure. Invariant 6 is about tasks
# the workflow code failed (a nondeterminism error, an exception) or the server refused for a bad command.
TURNED_BACK = frozenset({"UNHANDLED_COMMAND"})


async def temporal_evidence(client: Client, limit: int = 5_000) -> TemporalEvidence:
    """Every workflow run's history (all runs, closed ones too), scanned for workflow-task failures."""
    evidence = TemporalEvidence()
    executions = [execution async for execution in client.list_workflows(limit=limit)]
    for execution in executions:
        evidence.workflows += 1
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        if execution.workflow_type == "HelperWorkflow":
            evidence.helper_runs.setdefault(execution.id, []).append(execution.run_id)
            if execution.status is WorkflowExecutionStatus.RUNNING:
                evidence.running_helpers.append(execution.id)
            elif execution.status is WorkflowExecutionStatus.COMPLETED:
                result = await handle.result(follow_runs=False)
                evidence.helper_results.setdefault(execution.id, []).append(f"run {execution.run_id[:8]}: {result}")
        recent: list[str] = []
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                attributes = event.workflow_task_failed_event_attributes
                cause = WorkflowTaskFailedCause.Name(attributes.cause).removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")
                evidence.failure_causes[cause] += 1
                if cause in TURNED_BACK:
                    continue
                message = attributes.failure.message.replace("\n", " ")[:300]
                evidence.task_failures.append(
                    f"{execution.id} (run {execution.run_id[:8]}) event {event.event_id}: {cause}: {message}"
                    f" (events before it: {', '.join(recent[-4:])})"
                )
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                evidence.task_timeouts += 1
            recent.append(EventType.Name(event.event_type).removeprefix("EVENT_TYPE_"))
    return evidence


async def running_helper_count(client: Client) -> int:
    query = "WorkflowType = 'HelperWorkflow' AND ExecutionStatus = 'Running'"
    return len([execution async for execution in client.list_workflows(query, limit=1_000)])


async def eventually_true(check: Callable[[], Any], *, timeout: float, interval: float = 1.0) -> bool:
    """Poll an async `check` until it is truthy; False after `timeout` (errors count as not yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await check():
                return True
        except Exception:
            pass
        await asyncio.sleep(interval)
    return False


def trails(problems: list[str], journal: list[str], logs: Path, *, helpers: int = 4, lines: int = 30) -> str:
    """For the first helpers named in the failed invariants, their lines in the journal and the processes'
    logs, so a failure in CI (whose temporary directory is gone) tells its own story."""
    named: list[str] = []
    for problem in problems:
        for found in re.findall(r"(?<![/\w])([a-z]+/h\d\d-[a-z]+)\b", problem):
            if found not in named:
                named.append(found)
    told = []
    for owner_and_helper in named[:helpers]:
        owner, helper_id = owner_and_helper.split("/")
        mine = [line for line in journal if owner_and_helper in line or f"--id {helper_id}" in line]
        for log in sorted(logs.glob("*.log")) if logs.is_dir() else []:
            text = log.read_text(encoding="utf-8", errors="replace").splitlines()
            mine += [f"{log.stem}: {line[:400]}" for line in text if helper_id in line and owner in line]
        told.append(f"--- {owner_and_helper} ({len(mine)} lines, the last {lines}):\n" + "\n".join(mine[-lines:]))
    return "\n".join(told)
