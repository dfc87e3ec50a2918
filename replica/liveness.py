"""A replica that dies, freezes or is cut off has its follows started again on the others within seconds (R46, R57).

A follow sends no heartbeat (each one is a billable action), so the Temporal server cannot tell that the worker
running its attempt is gone. Each replica says in the store that it is alive, every REPLICA_BEAT (one write per
replica, however many helpers it follows), and looks for replicas silent for REPLICA_SILENT. It takes each silent
replica's record (one survivor alone wins its delete) and, for every running helper whose follow attempt the server
says runs there, has the server end that attempt now. Each attempt names its replica in the row; one that died
before it could, or whose poll was answered as the replica died, is among the rows naming no live replica. The
attempt is given a heartbeat timeout of LOST_ATTEMPT_TIMEOUT (UpdateActivityOptions), which an attempt that never
heartbeats has outlived, and its own options are restored once the next attempt is scheduled. The next attempt
runs on a live replica and resumes from the row.

A replica only frozen or cut off past REPLICA_SILENT loses its attempts the same way. When it comes back, its next
beat finds its record gone (`Takeover`): each of its follows asks the server whether it is still its helper's
current attempt, and the ones that are not end, so a helper is never followed twice for long; a late write of theirs
cannot take the row back (`store.statements.progress_update`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask
from temporalio.api.activity.v1 import ActivityOptions
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import UpdateActivityOptionsRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from protocol.names import FOLLOW_SESSION, helper_workflow_id
from store.helper_store import HelperStore
from store.statements import now

log = logging.getLogger("helper.liveness")

# A replica says it is alive this often: one store write each time.
REPLICA_BEAT = timedelta(seconds=2)
# Silent this long (four beats missed), a replica is taken for dead: its follows start again elsewhere. With a beat
# and a restart, a dead replica's helpers report again about 10-12 s after it died (python -m tools.bench.failover).
REPLICA_SILENT = timedelta(seconds=8)
# The heartbeat timeout that makes the server end a dead replica's attempt at once.
LOST_ATTEMPT_TIMEOUT = Duration(seconds=1)
# How long a survivor waits for the server to schedule the next attempt before it restores the options anyway.
RESTORE_WITHIN_S = 10.0
# Helpers restarted at once when a replica dies. A restart mostly waits on the server (the attempt's end, the next
# attempt's backoff), about 1.5 s and a handful of calls: with 100, a killed replica's 899 follows ran again within
# 42 s (p99; with 20, 905 within 88 s, and 119 later; python -m tools.bench.failover --helpers 1200 --step-ms 8000).
RESTARTS_AT_ONCE = 100
# How often a restart asks where the next attempt started, once it is scheduled (after its 1 s backoff).
HANDED_ON_CHECK_S = 0.5
# How long a survivor keeps ending a lost replica's follow attempt until one runs elsewhere: a frozen replica's
# polls stay open for about a minute (the server's long-poll expiry), and each may take an attempt meanwhile.
HANDOVER_WITHIN_S = 90.0
# A store or server call of the watch gives up after this, and the watch tries again at its next beat.
CALL_BOUND_S = 10.0


@contextlib.asynccontextmanager
async def restarting_lost_follows(client: Client, store: HelperStore, takeover: Takeover) -> AsyncIterator[None]:
    """While the worker runs: beat, and start the follows of silent replicas again; tell `takeover` when this
    replica's own record was taken. On a stop, this replica's record goes (its follows hand themselves over)."""
    watch = asyncio.create_task(_watch(client, store, client.identity, takeover))
    try:
        yield
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        try:
            await asyncio.wait_for(store.forget_replica(client.identity), CALL_BOUND_S)
        except Exception as error:  # the record then ages out, and a survivor finds nothing of it to restart
            log.warning("this replica's liveness record stays until it ages out: %s", error)


async def _watch(client: Client, store: HelperStore, identity: str, takeover: Takeover) -> None:
    restarting: set[asyncio.Task[None]] = set()
    limit = asyncio.Semaphore(RESTARTS_AT_ONCE)
    beating_since: float | None = None
    has_beaten = False
    while True:
        try:
            found = await asyncio.wait_for(store.beat_replica(identity), CALL_BOUND_S)
            if has_beaten and not found:
                log.warning(
                    "this replica was taken for dead (silent for %s); its follows run elsewhere", REPLICA_SILENT
                )
                takeover.happened()
            has_beaten = True
            beating_since = beating_since or time.monotonic()
            # Only a replica that has beaten for REPLICA_SILENT judges the others: after the store was away (or at
            # this replica's start) every record is old until each replica has beaten again.
            if time.monotonic() - beating_since < REPLICA_SILENT.total_seconds():
                lost = []
            else:
                lost = await asyncio.wait_for(
                    store.claim_silent_replicas(now() - REPLICA_SILENT, besides=identity), CALL_BOUND_S
                )
            for replica in lost:
                # Its own tasks: restarting a full replica's follows must not hold this replica's beats.
                task = asyncio.create_task(restart_follows_of(client, store, replica, limit))
                restarting.add(task)
                task.add_done_callback(restarting.discard)
        except Exception as error:  # the store or the server unreachable: the next beat tries again
            log.warning("replica liveness: %s", error)
            beating_since = None
        await asyncio.sleep(REPLICA_BEAT.total_seconds())


async def restart_follows_of(client: Client, store: HelperStore, replica: str, limit: asyncio.Semaphore) -> None:
    """Start again every follow attempt the server says runs on `replica`. The rows name the replica of each attempt
    that recorded itself; an attempt the replica received but never began (its poll answered as it died) or died
    before recording is found among the rows that name no live replica, each checked with the server."""
    helpers = await asyncio.wait_for(store.follows_without_live_replica(), CALL_BOUND_S)
    recorded = sum(1 for *_, named in helpers if named == replica)
    log.warning(
        "replica %s silent for %s: starting its %d follows again (and any of %d unrecorded ones it took)",
        replica,
        REPLICA_SILENT,
        recorded,
        len(helpers) - recorded,
    )

    async def one(owner: str, helper_id: str, named: str | None) -> None:
        async with limit:
            await restart_follow(client, helper_workflow_id(owner, helper_id), replica, recorded=named == replica)

    await asyncio.gather(*(one(*helper) for helper in helpers))


async def restart_follow(client: Client, workflow_id: str, lost_replica: str, *, recorded: bool = True) -> bool:
    """End the helper's follow attempt that runs on `lost_replica`, so that the server schedules the next one now,
    until an attempt runs elsewhere: a frozen replica's polls stay open, and the server may hand it the next attempt
    too. Each failed call is tried again, for HANDOVER_WITHIN_S in all; then the attempt ends at its start-to-close
    timeout. A follow whose row did not name the replica (not `recorded`) is touched only if the server says its
    attempt started there. False if its follow ran elsewhere already (or there is none)."""
    give_up_at = time.monotonic() + HANDOVER_WITHIN_S
    restarted = False
    while time.monotonic() < give_up_at:
        # An attempt not started yet ("") may still go to the lost replica's open polls: watched once it was there.
        watched = (lost_replica, "") if recorded or restarted else (lost_replica,)
        try:
            pending = await _follow_of(client, workflow_id)
            if pending is None or pending.last_worker_identity not in watched:
                return restarted
            if pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                await _end_attempt(client, workflow_id, pending)
                restarted = True
        except Exception as error:  # the server did not answer: tried again
            log.warning("the follow of %s is not started again yet: %s", workflow_id, error)
            await asyncio.sleep(1.0)
        await asyncio.sleep(HANDED_ON_CHECK_S)  # the next attempt is scheduled: see where it starts
    log.warning("the follow of %s still runs on %s; it ends at its start-to-close timeout", workflow_id, lost_replica)
    return restarted


async def _end_attempt(client: Client, workflow_id: str, pending: PendingActivityInfo) -> None:
    """Have the server end the started attempt now, and restore the activity's options once the next attempt is
    scheduled (before it starts: the next one runs with its own options)."""
    shortened = ActivityOptions(heartbeat_timeout=LOST_ATTEMPT_TIMEOUT)
    await _update_options(client, workflow_id, pending.activity_id, shortened, FieldMask(paths=["heartbeat_timeout"]))
    try:
        give_up_at = time.monotonic() + RESTORE_WITHIN_S
        while time.monotonic() < give_up_at:
            await asyncio.sleep(0.2)
            now_pending = await _follow_of(client, workflow_id)
            if now_pending is None or now_pending.activity_id != pending.activity_id:
                break
            if now_pending.attempt > pending.attempt:
                break
    finally:
        await _update_options(client, workflow_id, pending.activity_id, None, None)


class Takeover:
    """Tells this replica's follows that the others took it for dead. A follow then asks the server whether its
    attempt is still its helper's current one (`superseded`); an attempt ended meanwhile stops following."""

    def __init__(self) -> None:
        self._taken = asyncio.Event()
        self.count = 0  # how many times this replica was taken for dead

    def happened(self) -> None:
        self.count += 1
        self._taken.set()
        self._taken = asyncio.Event()

    async def superseded(self, client: Client, workflow_id: str, activity_id: str, attempt: int) -> None:
        """Returns once this replica was taken for dead and the server no longer runs `attempt` of the activity."""
        while True:
            await self._taken.wait()
            try:
                pending = await _follow_of(client, workflow_id)
            except Exception as error:  # the server cannot say: go on, as when nothing was taken
                log.warning("%s: could not ask whether its follow still runs here: %s", workflow_id, error)
                continue
            if pending is None or (pending.activity_id, pending.attempt) != (activity_id, attempt):
                return


async def _follow_of(client: Client, workflow_id: str) -> PendingActivityInfo | None:
    description = await asyncio.wait_for(client.get_workflow_handle(workflow_id).describe(), CALL_BOUND_S)
    for pending in description.raw_description.pending_activities:
        if pending.activity_type.name == FOLLOW_SESSION:
            return pending
    return None


async def _update_options(
    client: Client, workflow_id: str, activity_id: str, options: ActivityOptions | None, mask: FieldMask | None
) -> None:
    """Set the attempt's options, or (`options` None) restore the ones it was scheduled with."""
    request = UpdateActivityOptionsRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=workflow_id),
        identity=client.identity,
        id=activity_id,
        activity_options=options,
        update_mask=mask,
        restore_original=options is None,
    )
    try:
        await client.workflow_service.update_activity_options(request, timeout=timedelta(seconds=CALL_BOUND_S))
    except RPCError as error:
        if error.status is not RPCStatusCode.NOT_FOUND:  # the follow ended meanwhile: nothing to change
            raise
