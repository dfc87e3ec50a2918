"""One owner, many helpers: admissions through ONE coordinator, and the history length of each of its runs.

    .venv/bin/python -m tools.bench.one_owner [--helpers 1000] [--callers 3]

The owner keeps the default policy (3 open helpers, 3 running slots, 20 rows), so the bench drives it as Iva
would: each caller admits a helper, waits for its workflow to end (the core's sessions finish at their first
snapshot), then closes its outcome, which lets the row give way to later admissions; then again. Three
callers keep the three open places busy. Every admission, finished notice, close and chat offer goes through
the one coordinator, which continues as new on its own counters. At the end every run of the coordinator's
workflow id is listed with its history length, which must stay under the server's warning at 10,240 events.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from domain.messages.updates import Admission, CloseAnswer
from domain.requests import HelperRequest
from domain.rows import RowState
from protocol.deadlines import reply_by
from protocol.errors import Unavailable
from protocol.names import coordinator_id, helper_workflow_id
from protocol.update_senders import admit, close_helper
from tools.bench.helper_rate import Stack, run_stack

T = TypeVar("T")
HISTORY_WARNING_EVENTS = 10_240
OWNER = "solo"


# The server's answer to an update that was in a workflow task it turned back (UnhandledCommand: a signal came in
# while the coordinator was completing its run with continue-as-new). Nothing was done; asking again is safe.
TASK_TURNED_BACK = "unexpected workflow task failure"
ASK_AGAIN_ATTEMPTS = 5


@dataclass
class Counts:
    done: int = 0
    asked_again: int = 0


async def asking_again(call: Callable[[], Awaitable[T]], counts: Counts) -> T:
    """What Iva does with the starter's exit 3: ask again, here only for an update the server turned back."""
    for _ in range(ASK_AGAIN_ATTEMPTS - 1):
        try:
            return await call()
        except (RPCError, Unavailable) as error:
            if TASK_TURNED_BACK not in str(error):
                raise
            counts.asked_again += 1
            await asyncio.sleep(0.1)
    return await call()


async def drive(stack: Stack, helpers: int, callers: int) -> float:
    """Admit, wait, close, `helpers` times in all from `callers` concurrent callers; returns the seconds taken."""
    next_number = iter(range(helpers))
    counts = Counts()
    started = time.perf_counter()
    client, settings = stack.project_client, stack.settings

    def admitting(request: HelperRequest) -> Awaitable[Admission]:
        return admit(client, settings, request, reply_by(settings))

    def closing(helper_id: str) -> Awaitable[CloseAnswer]:
        return close_helper(client, settings, OWNER, helper_id, reply_by(settings))

    async def caller() -> None:
        for number in next_number:
            helper_id = f"h{number}"
            request = HelperRequest(owner=OWNER, helper_id=helper_id, task="Look up the answer.", model="scripted")
            admission = await asking_again(partial(admitting, request), counts)
            # One open helper per caller, so a slot is free. Asked again after the server turned the first ask
            # back, the admission may find its helper already done: that first ask had started it (R9).
            assert admission.status in (RowState.RUNNING, RowState.UNREPORTED), admission
            await client.get_workflow_handle(helper_workflow_id(OWNER, helper_id)).result()
            closed = await asking_again(partial(closing, helper_id), counts)
            assert closed.state is RowState.CLOSED, closed
            counts.done += 1
            if counts.done % 500 == 0:
                elapsed = time.perf_counter() - started
                print(f"{counts.done} helpers in {elapsed:.0f} s ({counts.done / elapsed:.1f}/s)", flush=True)

    await asyncio.gather(*(caller() for _ in range(callers)))
    seconds = time.perf_counter() - started
    print(f"updates the server turned back (a signal met a continue-as-new) and asked again: {counts.asked_again}")
    return seconds


async def run_lengths(stack: Stack) -> list[tuple[str, str, int]]:
    """(run id, status, history length) of every run of the coordinator, oldest first."""
    workflow_id = coordinator_id(OWNER)
    client = stack.project_client
    runs = [run async for run in client.list_workflows(f'WorkflowId = "{workflow_id}"')]
    lengths: list[tuple[str, str, int]] = []
    for run in sorted(runs, key=lambda run: run.start_time):
        length = run.history_length
        if run.status is WorkflowExecutionStatus.RUNNING or not length:
            # Visibility lags for the open run; its description is current.
            length = (await client.get_workflow_handle(workflow_id, run_id=run.run_id).describe()).history_length
        lengths.append((run.run_id, run.status.name if run.status else "?", length))
    return lengths


async def print_task_failures(stack: Stack) -> None:
    """Why the coordinator's workflow tasks failed or timed out, in every run: what a refused update points at."""
    client = stack.project_client
    workflow_id = coordinator_id(OWNER)
    async for run in client.list_workflows(f'WorkflowId = "{workflow_id}"'):
        history = await client.get_workflow_handle(workflow_id, run_id=run.run_id).fetch_history()
        for event in history.events:
            kind = EventType.Name(event.event_type)
            if kind in ("EVENT_TYPE_WORKFLOW_TASK_FAILED", "EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT"):
                failed = event.workflow_task_failed_event_attributes
                cause = WorkflowTaskFailedCause.Name(failed.cause) if failed.cause else ""
                print(f"run {run.run_id} event {event.event_id}: {kind} {cause} {failed.failure.message[:300]}")


async def main_async(helpers: int, callers: int, worker_script: Path | None) -> int:
    async with run_stack(max_rows=None, bare=False, worker_script=worker_script) as stack:
        try:
            seconds = await drive(stack, helpers, callers)
        except Exception:
            await print_task_failures(stack)
            raise
        print(
            f"{helpers} helpers admitted, run and closed through one owner in {seconds:.1f} s: "
            f"{helpers / seconds:.1f} helpers/s ({callers} callers)"
        )
        await asyncio.sleep(2)  # the last notices and offers land in the open run
        lengths = await run_lengths(stack)
        for number, (run_id, status, length) in enumerate(lengths, start=1):
            print(f"  run {number:3d} {run_id} {status:>16} {length:6d} events")
        longest = max(length for _, _, length in lengths)
        verdict = "ok" if longest < HISTORY_WARNING_EVENTS else "TOO LONG"
        print(
            f"coordinator runs: {len(lengths)}, longest history {longest} events "
            f"(server warns at {HISTORY_WARNING_EVENTS}): {verdict}",
            flush=True,
        )
        return 0 if longest < HISTORY_WARNING_EVENTS else 1


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.one_owner")
    parser.add_argument("--helpers", type=int, default=1000)
    parser.add_argument("--callers", type=int, default=3, help="concurrent callers (the policy allows 3 open)")
    parser.add_argument("--worker-script", type=Path, default=None, help="another worker.py to compare")
    arguments = parser.parse_args()
    code = asyncio.run(main_async(arguments.helpers, arguments.callers, arguments.worker_script))
    sys.stdout.flush()
    os._exit(code)  # sdk-python#300


if __name__ == "__main__":
    main()
