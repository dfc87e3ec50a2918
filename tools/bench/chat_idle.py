"""From an owner's chat turning idle to the system event waiting for it, with and without the chat saying so (R26).

    .venv/bin/python -m tools.bench.chat_idle [--owners 8] [--busy-s 20,45,90,150]

Each owner's helper finishes while the owner's chat is busy, so the coordinator's outbox offers the event, hears
"busy" and backs off (2 s, doubling, at most 5 minutes). After its busy spell the chat turns idle. Half the owners'
chats say nothing: the runtime learns at its next offer. The other half say so, as the chat bridge asks
(`POST /v1/owners/{owner}/idle`; the bench calls the client method that route calls). Both halves run side by side
with the same spells. Measured per owner: idle -> the chat accepted the event (the chat's own `accepted_at`), and
the coordinator's billable actions until then, from its history: activities scheduled, timers started, signals
received, local-activity markers. `--busy-s 3600` gives a busy hour.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections import Counter
from datetime import UTC, datetime

import httpx
from temporalio.api.enums.v1 import EventType

from contracts.chat_api import ReceivedEvent
from contracts.core_api import SessionStatus
from domain.book import outbox
from domain.requests import HelperRequest
from protocol.names import coordinator_id
from tools.bench.actions import ActionStack, action_stack
from tools.bench.common import describe

FINISH_WAIT_S = 60
# Past the outbox's longest backoff and an offer's bound. An event offered for longer than OFFER_GIVE_UP (an hour)
# is given up, and a spell that long ends with no event: its outcomes wait for the chat's next turn.
EVENT_WAIT_S = outbox.BACKOFF_MAX.total_seconds() + 60


async def _chat(http: httpx.AsyncClient, chat_url: str, owner: str, idle: bool) -> None:
    (
        await http.put(f"{chat_url}/v1/owners/{owner}/idle", json={"idle": idle, "tell_runtime": False})
    ).raise_for_status()


async def _event_of(http: httpx.AsyncClient, chat_url: str, owner: str) -> ReceivedEvent | None:
    received = (await http.get(f"{chat_url}/v1/owners/{owner}/events")).json()
    return ReceivedEvent.model_validate(received[0]) if received else None


# The coordinator's history events that are billable actions.
BILLABLE = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "activity",
    EventType.EVENT_TYPE_TIMER_STARTED: "timer",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: "signal",
    EventType.EVENT_TYPE_MARKER_RECORDED: "local activity",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: "update",
}


async def _coordinator_actions(stack: ActionStack, owner: str, until: datetime) -> Counter[str]:
    handle = stack.env.client.get_workflow_handle(coordinator_id(owner))
    counted: Counter[str] = Counter()
    async for event in handle.fetch_history_events():
        kind = BILLABLE.get(event.event_type)
        if kind is not None and event.event_time.ToDatetime(tzinfo=UTC) <= until:
            counted[kind] += 1
    return counted


async def _one_owner(
    stack: ActionStack, chat_url: str, owner: str, busy_s: float, tell: bool
) -> tuple[float | None, int]:
    """One owner's busy spell: the seconds from its chat turning idle to the chat accepting the event (None: given
    up), and the coordinator's billable actions until then."""
    http = stack.http
    helper_id = f"spell-{owner}"
    await _chat(http, chat_url, owner, idle=False)
    await stack.client.start(HelperRequest(owner=owner, helper_id=helper_id, task="Bench.", model="scripted"))
    deadline = time.monotonic() + FINISH_WAIT_S
    while (session := stack.core.session_of(helper_id)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{owner}: no session within {FINISH_WAIT_S} s")
        await asyncio.sleep(0.05)
    session.end(SessionStatus.COMPLETED, "Done.")
    await asyncio.sleep(busy_s)
    await _chat(http, chat_url, owner, idle=True)
    idle_at = datetime.now(UTC)
    if tell:
        await stack.client.chat_idle(owner)
    deadline = time.monotonic() + EVENT_WAIT_S
    while (event := await _event_of(http, chat_url, owner)) is None:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(2)  # the offer's answer reaches the coordinator's history
    actions = await _coordinator_actions(stack, owner, datetime.now(UTC))
    waited = (event.accepted_at - idle_at).total_seconds() if event is not None else None
    return waited, sum(actions.values())


def _report(name: str, spells: list[float], results: list[tuple[float | None, int]]) -> None:
    waits = [wait * 1000 for wait, _ in results if wait is not None]
    if waits:
        print(describe(f"{name}: chat idle -> event accepted (ms)", waits))
    for busy_s, (wait, actions) in sorted(zip(spells, results, strict=True), key=lambda pair: pair[0]):
        said = f"event {wait:7.2f} s after idle" if wait is not None else "no event: given up"
        print(f"  busy {busy_s:6.0f} s -> {said}; coordinator actions {actions}")


async def main(owners: int, spells: list[float]) -> None:
    per_owner = [spells[n % len(spells)] for n in range(owners)]
    async with action_stack(deadline_minutes=10) as stack:
        chat_url = stack.client.settings.chat_url
        silent = [_one_owner(stack, chat_url, f"silent-{n}", busy_s, False) for n, busy_s in enumerate(per_owner)]
        told = [_one_owner(stack, chat_url, f"told-{n}", busy_s, True) for n, busy_s in enumerate(per_owner)]
        results = await asyncio.gather(*silent, *told)
    _report("silent chat", per_owner, results[:owners])
    _report("chat says it turned idle", per_owner, results[owners:])


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.chat_idle")
    parser.add_argument("--owners", type=int, default=4, help="owners per half (silent, told)")
    parser.add_argument("--busy-s", default="20,45,90,150", help="busy spells, seconds, comma-separated")
    return parser.parse_args()


if __name__ == "__main__":
    arguments = _parse()
    asyncio.run(main(arguments.owners, [float(s) for s in arguments.busy_s.split(",")]))
    os._exit(0)  # sdk-python#300
