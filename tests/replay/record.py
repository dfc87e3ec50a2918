"""Record the histories the replay test keeps: `python -m tests.replay.record` writes one history per path into
tests/replay/histories/<build id>/, the folder of the build the worker polls as (config.settings.release_build_id).

It writes only histories that do not exist yet; `--replace` overwrites them, which is right while the build has
not been released. A new release records into a folder of its own (docs/operations.md, "Releases"). Each history
is one path a helper, a coordinator, a Goal check or the sweep can take, produced with the real parts: the dev
server or the time-skipping server, the worker, the reference core or the programmable fake core.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from config.settings import release_build_id
from contracts.core_api import SessionStatus
from domain.limits import FollowTuning, Limits, WaitPolicy
from domain.rows import RowState
from protocol.errors import HelperRefused
from protocol.names import coordinator_id, helper_workflow_id
from reference.chat.server import running_chat
from reference.core.script import scripted_task
from reference.core.server import running_core
from starter.client import HelperClient
from starter.goals import goal_schedule_id
from starter.inputs import answer_request, delivered_request, read_request
from store.helper_store import HelperStore
from tests.conftest import SEARCH_KEYS, TEMPORAL_CLI, TEST_SERVER, register_search_attributes
from tests.fakes.fake_core import FakeCore, serving_fake_core
from tests.helpers import chat_events, delete_workflow, eventually, helper_request, settings_for, skip_time
from worker import running_worker
from workflows.maintenance import SweepWorkflow

HISTORIES = Path(__file__).parent / "histories" / release_build_id()
FAST = FollowTuning(poll_ms=100, window_ms=5_000, resume_ms=200, silence_ms=60_000, wait_ms=2_000)
OWNER = "recorded"
REPLACE = [False]


async def _final(client: HelperClient, helper_id: str) -> bool:
    row = await client.store.get(OWNER, helper_id)
    return row is not None and row.outcome_kind is not None


async def _save(client: Client, workflow_id: str, name: str, *, completed: bool = True) -> None:
    handle = client.get_workflow_handle(workflow_id)
    if completed:
        await eventually(lambda: _completed(client, workflow_id), timeout=30)
    history = await handle.fetch_history()
    target = HISTORIES / f"{name}.json"
    if target.exists() and not REPLACE[0]:
        print(f"kept {target.name} (exists; --replace to overwrite)")
        return
    target.write_text(history.to_json())
    print(f"recorded {target.name}: {len(history.events)} events")


async def _completed(client: Client, workflow_id: str) -> bool:
    """Ended: completed, or failed (a helper whose outcome is failed ends its workflow failed)."""
    description = await client.get_workflow_handle(workflow_id).describe()
    return description.status is not None and description.status.name in ("COMPLETED", "FAILED")


async def record_reference_core_paths(env: WorkflowEnvironment, work: Path) -> None:
    """Completed with actions, question, authorization, a follow-up of the question, failed, work ceiling,
    closed while running and while waiting, interrupted by a core restart; then the coordinator that saw all
    of it."""
    async with running_chat() as chat_url:
        core = running_core(work / "core.sqlite3")
        core_url = await core.__aenter__()
        port = int(core_url.rsplit(":", 1)[1])
        settings = settings_for(work, core_url, chat_url, follow=FAST)
        store = await HelperStore.connect(settings.store, run_migrations=True)
        async with running_worker(env.client, settings):
            client = HelperClient(settings, store.reads, env.client)
            send = {"step": 1, "tool": "send_mail", "args": {"to": "bob@example.com", "subject": "Q3", "body": "+12%"}}
            # The wave holds until the fourth admission is refused: a quick wave could end first and let it in.
            held = {"hold_until": "wave-refused"}
            wave = {
                "completed": (
                    scripted_task("Mail Bob.", steps=2, step_ms=50, tool_calls=[send], **held),
                    ("send_mail to bob@example.com",),
                ),
                "question": (
                    scripted_task("Venue?", steps=1, step_ms=50, end="question", question="Taxi?", **held),
                    (),
                ),
                "authorization": (
                    scripted_task(
                        "Pay.", steps=1, step_ms=50, end="authorization", authorization="pay invoice", **held
                    ),
                    (),
                ),
            }
            for helper_id, (task, boundary) in wave.items():
                await client.start(helper_request(OWNER, helper_id, task, boundary=boundary))
            with contextlib.suppress(HelperRefused):
                await client.start(helper_request(OWNER, "refused"))
            async with httpx.AsyncClient() as http:
                await http.post(f"{core_url}/v1/demo/latches/wave-refused/release")
            for helper_id in wave:
                await eventually(functools.partial(_final, client, helper_id), timeout=30)
            # A follow-up continues the question's kept session.
            answer = scripted_task("Taxi is fine.", steps=1, step_ms=50, recall="Venue")
            await client.start(helper_request(OWNER, "follow-up", answer, follow_up="question"))
            await eventually(functools.partial(_final, client, "follow-up"), timeout=30)
            heavy = scripted_task("Scan.", end="run", steps=80, step_ms=50, input_tokens=400_000, output_tokens=300_000)
            await client.start(helper_request(OWNER, "work-ceiling", heavy))
            await client.start(helper_request(OWNER, "failed", scripted_task("Rates.", steps=1, end="fail", error="x")))
            long = scripted_task("Watch.", end="run", steps=80, step_ms=200, cancel_delay_ms=1500)
            await client.start(helper_request(OWNER, "closed-running", long))
            await eventually(lambda: _final(client, "work-ceiling"), timeout=30)
            await eventually(lambda: _final(client, "failed"), timeout=30)
            await client.start(helper_request(OWNER, "filler-1", scripted_task("Fill.", end="run", steps=80)))
            await client.start(helper_request(OWNER, "filler-2", scripted_task("Fill.", end="run", steps=80)))
            await client.close(OWNER, "closed-running")
            await client.start(helper_request(OWNER, "closed-waiting", scripted_task("Wait.", steps=1)))
            await client.close(OWNER, "closed-waiting")
            await eventually(lambda: _final(client, "closed-running"), timeout=30)
            await client.close(OWNER, "filler-2")
            await eventually(lambda: _final(client, "filler-2"), timeout=30)
            # Interrupted: the core stops and comes back on its file while filler-1 runs.
            await core.__aexit__(None, None, None)
            async with running_core(work / "core.sqlite3", port):
                await eventually(lambda: _final(client, "filler-1"), timeout=30)
            unreported = [view.helper_id for view in await client.unreported(OWNER)]
            await client.read(read_request(OWNER, "turn-1", unreported))
            await client.delivered(delivered_request(OWNER, "turn-1", answer_chars=12))
            await client.close(OWNER, "completed")
            for name in (
                "completed",
                "question",
                "authorization",
                "work-ceiling",
                "failed",
                "closed-running",
                "closed-waiting",
                "filler-1",
                "follow-up",
            ):
                label = "interrupted" if name == "filler-1" else name
                await _save(env.client, helper_workflow_id(OWNER, name), f"helper-{label}")
            # The coordinator never ends: its history so far replays like any other.
            await _save(env.client, coordinator_id(OWNER), "coordinator-lifecycle", completed=False)
            await record_goal_check_and_sweep(env, client)
            async with running_core(work / "core.sqlite3", port):
                await record_withdrawn_event(env, client, store, chat_url)
        await store.close()


async def record_answer_paths(env: WorkflowEnvironment, work: Path) -> None:
    """A coordinator that takes answers (R49): two answers to a structured question at once (one taken, with its
    follow-up admitted; the other answered with the first), a grant of an authorization wait narrowed to one of its
    recipients (R55) and a deny, each answered again later."""
    owner = "answered"
    options = [("walk", "Walking distance"), ("taxi", "Taxi")]
    async with running_chat() as chat_url, running_core(work / "core.sqlite3") as core_url:
        settings = settings_for(work, core_url, chat_url, follow=FAST)
        store = await HelperStore.connect(settings.store, run_migrations=True)
        async with running_worker(env.client, settings):
            client = HelperClient(settings, store.reads, env.client)
            asks = {
                "venue": scripted_task(
                    "Venue?", steps=1, step_ms=50, end="question", question="Where?", options=options, question_id="v"
                ),
                "grant": scripted_task(
                    "Mail.",
                    steps=1,
                    step_ms=50,
                    end="authorization",
                    authorization="send_mail to b@example.com, d@example.com",
                ),
                "deny": scripted_task(
                    "Mail.", steps=1, step_ms=50, end="authorization", authorization="send_mail to c@example.com"
                ),
            }
            for helper_id, task in asks.items():
                await client.start(helper_request(owner, helper_id, task))
            for helper_id in asks:
                await eventually(functools.partial(_row_final, store, owner, helper_id), timeout=30)
            await asyncio.gather(
                client.answer(answer_request(owner, "venue", "v", option_id="walk")),
                client.answer(answer_request(owner, "venue", "v", option_id="taxi")),
            )
            narrowed = answer_request(
                owner, "grant", "authorization", option_id="grant", text="send_mail to b@example.com"
            )
            await client.answer(narrowed)
            await client.answer(answer_request(owner, "deny", "authorization", option_id="deny"))
            for helper_id in ("venue.answer", "grant.answer"):
                await eventually(functools.partial(_row_final, store, owner, helper_id), timeout=30)
            await client.answer(answer_request(owner, "venue", "v", option_id="taxi"))
            await client.answer(answer_request(owner, "deny", "authorization", option_id="grant"))
            await client.answer(answer_request(owner, "grant", "authorization", option_id="grant"))
            await _save(env.client, coordinator_id(owner), "coordinator-answers", completed=False)
        await store.close()


async def record_withdrawn_event(env: WorkflowEnvironment, client: HelperClient, store: HelperStore, chat: str) -> None:
    """A coordinator whose chat is down: its event is offered again after a backoff, the outcome is read and
    delivered meanwhile, so the event is withdrawn; the chat comes back and a fresh outcome's event is offered."""
    owner = "recorded-withdrawn"

    async def events_in(state: str | None, attempts: int = 0) -> bool:
        events = await chat_events(store, owner)
        return bool(events) and state in (None, events[-1].state) and events[-1].attempts >= attempts

    async with httpx.AsyncClient() as http:
        await http.put(f"{chat}/v1/control/failing", json={"failing": True, "mode": "down"})
        await client.start(helper_request(owner, "first", scripted_task("First.", steps=1, step_ms=20)))
        await eventually(lambda: events_in(None, attempts=2), timeout=30)
        await client.read(read_request(owner, "turn-1", ["first"]))
        await client.delivered(delivered_request(owner, "turn-1", answer_chars=12))
        await eventually(lambda: events_in("withdrawn"), timeout=30)
        await http.put(f"{chat}/v1/control/failing", json={"failing": False, "mode": "down"})
        await client.start(helper_request(owner, "second", scripted_task("Second.", steps=1, step_ms=20)))
        await eventually(lambda: events_in("delivered"), timeout=30)
    await _save(env.client, coordinator_id(owner), "coordinator-withdrawn-event", completed=False)


async def record_regrant_paths(env: WorkflowEnvironment, work: Path) -> None:
    """A coordinator whose slot signals find no workflow: one deleted (started again from its row), one
    terminated (its slot passes on, its row is closed). Four open helpers, so one waits."""
    owner = "recorded-regrant"
    async with running_chat() as chat_url, running_core(work / "core.sqlite3") as core_url:
        settings = settings_for(work, core_url, chat_url, follow=FAST, max_open=4)
        store = await HelperStore.connect(settings.store, run_migrations=True)
        async with running_worker(env.client, settings):
            client = HelperClient(settings, store.reads, env.client)
            hold = scripted_task("Hold.", hold_until="regrant-go")
            for helper_id in ("busy-0", "busy-1"):
                await client.start(helper_request(owner, helper_id, hold))
            for gone, taken_away, freed in (("deleted", _delete, "busy-0"), ("terminated", _terminate, "busy-1")):
                await client.start(helper_request(owner, f"{gone}-before", hold))  # the third slot
                await client.start(helper_request(owner, gone, scripted_task("Queued.", steps=1, step_ms=20)))
                await taken_away(env.client, helper_workflow_id(owner, gone))
                await client.close(owner, freed)
                await eventually(lambda: _ended(store, owner, gone), timeout=30)  # noqa: B023
            async with httpx.AsyncClient() as http:
                await http.post(f"{core_url}/v1/demo/latches/regrant-go/release")
            await eventually(lambda: _ended(store, owner, "terminated-before"), timeout=30)
            await _save(env.client, coordinator_id(owner), "coordinator-regrant", completed=False)
        await store.close()


async def _delete(client: Client, workflow_id: str) -> None:
    await delete_workflow(client, workflow_id)


async def _terminate(client: Client, workflow_id: str) -> None:
    await client.get_workflow_handle(workflow_id).terminate("recorded: an operator removed it")


async def _ended(store: HelperStore, owner: str, helper_id: str) -> bool:
    row = await store.get(owner, helper_id)
    return row is not None and (row.outcome_kind is not None or row.state.value == "closed")


async def record_goal_check_and_sweep(env: WorkflowEnvironment, client: HelperClient) -> None:
    """A Goal check admitted by its Schedule, and one run of the orphan sweep."""
    await client.add_goal(
        {"owner": OWNER, "goal_id": "digest", "task": "Digest.", "model": "scripted", "every_ms": 3_600_000}
    )
    await client.run_goal_now(OWNER, "digest")
    description = await eventually(lambda: _goal_ran(env.client), timeout=30)
    check_id = description.info.recent_actions[0].action.workflow_id
    await _save(env.client, check_id, "goal-check")
    await client.remove_goal(OWNER, "digest")
    await env.client.execute_workflow(SweepWorkflow.run, id="recorded-sweep", task_queue=client.settings.task_queue)
    await _save(env.client, "recorded-sweep", "sweep")


async def _goal_ran(client: Client) -> Any:
    description = await client.get_schedule_handle(goal_schedule_id(OWNER, "digest")).describe()
    return description if description.info.recent_actions else None


async def record_time_skipped_paths(work: Path) -> None:
    """The 45-minute deadline answered within grace, and the 47-minute hard ceiling of a silent core."""
    for name, on_finish in (("helper-deadline-partial", "partial"), ("helper-hard-ceiling", "ignore")):
        folder = work / name
        folder.mkdir()
        await _record_time_skipped(folder, name, FakeCore(on_finish=on_finish))
    folder = work / "helper-lost-create"
    folder.mkdir()
    await _record_lost_create(folder, "helper-lost-create")
    folder = work / "coordinator-wait"
    folder.mkdir()
    await _record_wait(folder, "coordinator-wait")


async def _record_wait(folder: Path, name: str) -> None:
    """A coordinator whose delivered question is reminded twice, then expires unanswered, and a late answer refused
    (R54); the reference chat hears each."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(TEST_SERVER), data_converter=pydantic_data_converter
    )
    await register_search_attributes(env)
    core = FakeCore()
    wait = WaitPolicy(remind_after_ms=(3_600_000, 7_200_000), expire_after_ms=10_800_000)
    try:
        async with serving_fake_core(core) as core_url, running_chat() as chat_url:
            settings = settings_for(folder, core_url, chat_url, skipping_time=True, wait=wait)
            store = await HelperStore.connect(settings.store, run_migrations=True)
            async with running_worker(env.client, settings):
                client = HelperClient(settings, store.reads, env.client)
                await client.start(helper_request(name, "h1"))
                session = await eventually(lambda: core.sessions.get("fake-1"))
                session.question, session.status = "Walk or taxi?", SessionStatus.QUESTION
                await eventually(lambda: _row_final(store, name), timeout=30)
                await client.read(read_request(name, "t-1", ["h1"]))
                await client.delivered(delivered_request(name, "t-1", answer_chars=40))
                await skip_time(env, timedelta(hours=3, minutes=5))
                await eventually(lambda: _row_expired(store, name), timeout=30)
                with contextlib.suppress(HelperRefused):
                    await client.answer(answer_request(name, "h1", "question", text="walk"))
                await _save(env.client, coordinator_id(name), name, completed=False)
            await store.close()
    finally:
        await env.shutdown()


async def _row_expired(store: HelperStore, owner: str) -> bool:
    row = await store.get(owner, "h1")
    return row is not None and row.state is RowState.EXPIRED


async def _record_lost_create(folder: Path, name: str) -> None:
    """Every create answered after the call bound: failed at the hard ceiling, the session found by its key."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(TEST_SERVER), data_converter=pydantic_data_converter
    )
    await register_search_attributes(env)
    core = FakeCore(create_delay_s=1.0)
    try:
        async with serving_fake_core(core) as core_url:
            settings = settings_for(
                folder,
                core_url,
                "http://127.0.0.1:9",
                skipping_time=True,
                check_ms=400,
                limits=Limits(deadline_ms=60_000, grace_ms=30_000),
            )
            store = await HelperStore.connect(settings.store, run_migrations=True)
            async with running_worker(env.client, settings):
                client = HelperClient(settings, store.reads, env.client)
                await client.start(helper_request(name, "h1"))
                await eventually(lambda: core.create_calls >= 1)
                await skip_time(env, timedelta(seconds=95), chunk=timedelta(seconds=5))
                await eventually(lambda: _row_final(store, name), timeout=60)
                await _save(env.client, helper_workflow_id(name, "h1"), name)
            await store.close()
    finally:
        await env.shutdown()


async def _record_time_skipped(folder: Path, name: str, core: FakeCore) -> None:
    # A server per history: the time-skipping server does not skip while another run's tasks wait.
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(TEST_SERVER), data_converter=pydantic_data_converter
    )
    await register_search_attributes(env)
    try:
        async with serving_fake_core(core) as core_url:
            settings = settings_for(folder, core_url, "http://127.0.0.1:9", skipping_time=True)
            store = await HelperStore.connect(settings.store, run_migrations=True)
            async with running_worker(env.client, settings):
                client = HelperClient(settings, store.reads, env.client)
                await client.start(helper_request(name, "h1"))
                session = await eventually(lambda: core.sessions.get("fake-1"))
                session.add_step(1_000, 100, "first findings")
                await skip_time(env, timedelta(minutes=48))
                await eventually(lambda: _row_final(store, name), timeout=30)
                await _save(env.client, helper_workflow_id(name, "h1"), name)
            await store.close()
    finally:
        await env.shutdown()


async def _row_final(store: HelperStore, owner: str, helper_id: str = "h1") -> bool:
    row = await store.get(owner, helper_id)
    return row is not None and row.outcome_kind is not None


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.replay.record")
    parser.add_argument("--replace", action="store_true", help="overwrite existing histories")
    arguments = parser.parse_args()
    REPLACE[0] = arguments.replace
    HISTORIES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(TEMPORAL_CLI),
            data_converter=pydantic_data_converter,
            search_attributes=SEARCH_KEYS,
            dev_server_log_level="error",
        )
        try:
            (work / "core").mkdir()
            await record_reference_core_paths(env, work / "core")
            (work / "regrant").mkdir()
            await record_regrant_paths(env, work / "regrant")
            (work / "answers").mkdir()
            await record_answer_paths(env, work / "answers")
        finally:
            await env.shutdown()
        (work / "skipped").mkdir()
        await record_time_skipped_paths(work / "skipped")


if __name__ == "__main__":
    asyncio.run(main())
    os._exit(0)  # sdk-python#300: skip the interpreter teardown after a worker ran
