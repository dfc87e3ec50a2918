"""A test-only worker that dies in the middle of an admission: `python -m tests.crash_worker`.

It builds the worker of `worker.py` (same workflows, same activities from `activities_of`, same options) with
one change: the `admit_helper` and `offer_chat_event` activities are wrapped, and a workflow interceptor watches
the coordinator's `admit` update, so the process can end with `os._exit(137)` (as a SIGKILL or an evicted pod
would end it) at one of three points of an admission:

- `after_row`: `admit_helper` wrote the row and has not started the helper workflow;
- `after_start`: `admit_helper` started the helper workflow and has not returned;
- `after_return`: the activity returned and the `admit` handler finished, but the coordinator's workflow task,
  which records the admission's answer, is not completed yet.

and at a fourth, outside admissions: `in_offer`, when a chat offer activity starts for an event whose first helper
is the armed one.

A point is armed by a marker file in `$HELPER_CRASH_DIR` named after it and holding the helper id it applies to.
The admission that reaches the point deletes the marker before it exits, so the respawned worker runs normally.
Configuration is `worker.py`'s (the environment, docs/configuration.md); `$HELPER_CRASH_WORKFLOW_TASK_SLOTS`
optionally limits the concurrent workflow tasks (see `WORKFLOW_TASK_SLOTS_ENV`). Unlike `worker.py` it serves
no health endpoint and no metrics; like it, it beats as a replica and starts the follows of a silent one again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from temporalio import activity, workflow
from temporalio.worker import (
    HandleUpdateInput,
    Interceptor,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from activities.admission import AdmissionActivities
from activities.chat import ChatActivities
from activities.session import SessionActivities
from clients.chat_client import ChatClient
from clients.core_client import CoreClient
from config.settings import Settings
from domain.messages.activities import AdmitHelper, FollowedUp, OfferEvent, OfferResult
from domain.rows import HelperRow
from protocol.connection import connect_for
from protocol.names import ADMIT, ADMIT_HELPER, OFFER_CHAT_EVENT
from replica.liveness import Takeover, restarting_lost_follows
from store.helper_store import HelperStore
from store.results import ResultDirectories
from worker import CACHED_WORKFLOWS, WORKFLOWS, activities_of, deployment_of, follows_worker, promote
from workflows.maintenance import ensure_sweep_schedule

CRASH_DIR_ENV = "HELPER_CRASH_DIR"
# With 1, the worker holds no free workflow-task slot while the coordinator's task runs the admission, so it
# does not poll: a helper started by that admission waits in the task queue for the respawned worker instead
# of being handed to the worker about to die (where its first task would time out like the coordinator's).
# The workflow cache (and with it the sticky queue) is then off: with one slot a task on the sticky queue
# could wait behind another workflow's task until its schedule-to-start timeout.
WORKFLOW_TASK_SLOTS_ENV = "HELPER_CRASH_WORKFLOW_TASK_SLOTS"
AFTER_ROW = "after_row"
AFTER_START = "after_start"
AFTER_RETURN = "after_return"
IN_OFFER = "in_offer"
POINTS = (AFTER_ROW, AFTER_START, AFTER_RETURN, IN_OFFER)
CRASH_EXIT = 137
ADMIT_ACTIVITY = ADMIT_HELPER
OFFER_ACTIVITY = OFFER_CHAT_EVENT

log = logging.getLogger("helper.crash_worker")


def crash_if_armed(point: str, helper_id: str) -> None:
    """End the process at once if `point` is armed for `helper_id`; disarm it first (once per marker)."""
    directory = os.environ.get(CRASH_DIR_ENV)
    if not directory:
        return
    marker = Path(directory) / point
    try:
        armed_for = marker.read_text().strip()
    except FileNotFoundError:
        return
    if armed_for != helper_id:
        return
    try:
        marker.unlink()
    except FileNotFoundError:
        return  # another task of this process took it
    log.warning("crash point %s reached for helper %s: exiting %s", point, helper_id, CRASH_EXIT)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(CRASH_EXIT)


class _StoreThatCrashesAfterTheRow:
    """The worker's store, except that writing an admitted row may end the process right after the write."""

    def __init__(self, store: HelperStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def insert_admitted(self, row: HelperRow, followed_up: FollowedUp | None = None) -> bool:
        written = await self._store.insert_admitted(row, followed_up)
        crash_if_armed(AFTER_ROW, row.helper_id)
        return written


def crashing_admit_helper(store: HelperStore, results: ResultDirectories) -> Any:
    """The production `admit_helper`, registered under its name, with the `after_row`/`after_start` points."""
    admission = AdmissionActivities(cast(HelperStore, _StoreThatCrashesAfterTheRow(store)), results)

    @activity.defn(name=ADMIT_ACTIVITY)
    async def admit_helper(admitted: AdmitHelper) -> None:
        await admission.admit_helper(admitted)
        crash_if_armed(AFTER_START, admitted.start.helper_id)

    return admit_helper


def crashing_offer(chat_activities: ChatActivities) -> Any:
    """The production `offer_chat_event`, with the `in_offer` point before it asks the chat anything."""

    @activity.defn(name=OFFER_ACTIVITY)
    async def offer_chat_event(offer: OfferEvent) -> OfferResult:
        crash_if_armed(IN_OFFER, offer.helper_ids[0] if offer.helper_ids else "")
        return await chat_activities.offer_chat_event(offer)

    return offer_chat_event


class _CrashAfterAdmit(WorkflowInboundInterceptor):
    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        result = await super().handle_update_handler(input)
        if input.update == ADMIT and input.args and not workflow.unsafe.is_replaying():
            helper_id = str(getattr(input.args[0], "helper_id", ""))
            # The handler has its answer; the workflow task carrying it has not been completed yet.
            with workflow.unsafe.sandbox_unrestricted():
                crash_if_armed(AFTER_RETURN, helper_id)
        return result


class CrashInterceptor(Interceptor):
    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _CrashAfterAdmit


def crash_activities(
    store: HelperStore, results: ResultDirectories, core: CoreClient, chat: ChatClient, settings: Settings
) -> list[Any]:
    """`worker.activities_of`, with `admit_helper` and `offer_chat_event` replaced by their crashing wrappers."""
    activities: list[Any] = activities_of(store, results, core, chat, settings)
    replaced = (ADMIT_ACTIVITY, OFFER_ACTIVITY)
    kept = [fn for fn in activities if getattr(fn, "__name__", "") not in replaced]
    if len(kept) != len(activities) - len(replaced):
        raise RuntimeError("worker.activities_of no longer lists exactly one admit_helper and one offer_chat_event")
    return [*kept, crashing_admit_helper(store, results), crashing_offer(ChatActivities(store, chat))]


async def serve(settings: Settings) -> None:
    client = await connect_for(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await ensure_sweep_schedule(client, settings.task_queue)
    store = await HelperStore.connect(settings.store, run_migrations=settings.migrates_on_start)
    core = CoreClient.of_worker(settings)
    chat = ChatClient.of_worker(settings)
    results = ResultDirectories(settings.results_dir)
    slots = _workflow_task_slots()
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=WORKFLOWS,
        activities=crash_activities(store, results, core, chat, settings),
        interceptors=[CrashInterceptor()],
        graceful_shutdown_timeout=timedelta(seconds=10),
        max_concurrent_activities=settings.max_concurrent_activities,
        max_concurrent_workflow_tasks=slots,
        max_cached_workflows=CACHED_WORKFLOWS if slots is None else 0,  # as in worker.py
        deployment_config=deployment_of(settings),
    )
    takeover = Takeover()
    follows = follows_worker(client, settings, SessionActivities(store, core, results, takeover))
    try:
        async with worker, follows, restarting_lost_follows(client, store, takeover):
            await promote(client, settings)
            log.info("crash worker polling %s as %s", settings.task_queue, client.identity)
            await stop.wait()
    finally:
        await core.aclose()
        await chat.aclose()
        await store.close()


def _workflow_task_slots() -> int | None:
    """worker.py's default (None) unless the test asks for fewer concurrent workflow tasks."""
    raw = os.environ.get(WORKFLOW_TASK_SLOTS_ENV)
    return int(raw) if raw else None


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("HELPER_LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    code = 0
    try:
        asyncio.run(serve(Settings.from_env()))
    except Exception:
        log.exception("crash worker failed")
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # sdk-python#300, as in worker.py


if __name__ == "__main__":
    main()
