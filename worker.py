"""The worker: runs the coordinator and helper workflows and their activities. `python worker.py`.

One process polls two task queues: the workflows and the short activities on HELPER_TASK_QUEUE, and the helpers'
follows on a queue of their own (`protocol.names.follows_task_queue`), each with its own slots, so an admission
never waits for a slot behind the follows of running helpers.

Configuration comes from the environment (see docs/configuration.md). In Kubernetes run N replicas;
on SIGTERM the worker stops polling, the follows end their attempts at once (Temporal hands each to another
replica, which resumes from the row), and the short activities get GRACEFUL_SHUTDOWN to finish.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import resource
import signal
import sys
from collections.abc import AsyncIterator, Coroutine, Sequence
from datetime import timedelta
from typing import Any

from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker, WorkerDeploymentConfig, WorkerDeploymentVersion
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.admission import AdmissionActivities
from activities.chat import ChatActivities
from activities.goals import GoalActivities
from activities.rows import RowActivities
from activities.session import SessionActivities
from clients.chat_client import ChatClient
from clients.core_client import CoreClient
from codec.encryption import CodecError, codec_from, of_worker
from config import help as help_text
from config.settings import Settings, SettingsError, retired_variables_set, tree_variables
from observability import tracing
from observability.pauses import watching_pauses
from protocol.connection import connect_for
from protocol.names import follows_task_queue
from protocol.refusals import AdmissionRefusals
from replica.collector import keeping_the_heap
from replica.health import StoreGauges, serving_health
from replica.liveness import Takeover, restarting_lost_follows
from store.helper_store import HelperStore
from store.results import ResultDirectories
from workflows.coordinator import CoordinatorWorkflow
from workflows.goal_check import GoalCheckWorkflow
from workflows.helper import HelperWorkflow
from workflows.maintenance import SweepWorkflow, ensure_sweep_schedule

log = logging.getLogger("helper.worker")

WORKFLOWS = [CoordinatorWorkflow, HelperWorkflow, GoalCheckWorkflow, SweepWorkflow]

# The sandbox re-imports, for every workflow run, each module it does not pass through. These layers keep no
# module-level state and are deterministic, so one import serves every run; the sandbox still gives each run its
# own instance and restricts what workflow code may call.
DETERMINISTIC_LAYERS = ("workflows", "domain", "protocol", "contracts", "config")
WORKFLOW_RUNNER = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules(*DETERMINISTIC_LAYERS)
)
# How long a starting worker tries to make its build current: the server knows a version once its worker polls.
PROMOTE_WITHIN_S = 30.0
# What a stopping worker gives its running activities before cancelling them. The follows end their attempts as
# soon as shutdown begins (activities/session.py), so this serves the short activities: a core call is bounded by
# HELPER_CHECK_MS (15 s), and one cut short is retried on another replica, so waiting longer only delays the exit.
GRACEFUL_SHUTDOWN = timedelta(seconds=15)
# File descriptors beyond the HTTP connections: the store's pool, Temporal's channels, the health and metrics
# listeners, the Python runtime's own files.
DESCRIPTORS_BESIDE_CONNECTIONS = 256
# The workflow runs a replica keeps in memory between their tasks (the SDK's sticky cache): those with tasks coming
# soon, the coordinators of owners at work and helpers starting or ending. A running helper's next task comes when its
# follow returns or its deadline fires, minutes away, and its short history replays in milliseconds then; kept cached
# meanwhile it would cost about 100 KiB and objects every full collection scans. Measured goal: a replica at its
# 2,000 running helpers holds about 90 KiB each instead of 200 (python -m tools.bench.capacity).
CACHED_WORKFLOWS = 500


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    """uvloop's event loop where it installs (not on Windows). The goal it serves: worker CPU per quick helper
    ≤ ×3 of the bare workflow (python -m tools.bench.helper_rate)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def activities_of(
    store: HelperStore, results: ResultDirectories, core: CoreClient, chat: ChatClient, settings: Settings
) -> list[object]:
    """The short activities, on HELPER_TASK_QUEUE: everything but the follow."""
    admission = AdmissionActivities(store, results)
    rows = RowActivities(store, results, settings.audit_keep_ms)
    session = SessionActivities(store, core, results)
    chat_activities = ChatActivities(store, chat)
    goals = GoalActivities(settings)
    return [
        admission.admit_helper,
        admission.regrant_helper,
        rows.remove_rows,
        rows.sweep_orphan_directories,
        rows.forget_wait_records,
        rows.mark_closed,
        rows.finalize_outcome,
        rows.coordinator_write,
        session.open_session,
        session.finish_session,
        session.cancel_session,
        session.reset_session,
        session.park_session,
        session.recover_session,
        session.reset_kept_sessions,
        chat_activities.offer_chat_event,
        chat_activities.withdraw_chat_event,
        goals.start_goal_check,
    ]


@contextlib.asynccontextmanager
async def running_worker(client: Client, settings: Settings) -> AsyncIterator[Worker]:
    """A started worker (the workflows and short activities, and beside it the follows' worker) with its store and
    HTTP clients; everything is closed on exit."""
    client = worker_client(client)
    ensure_descriptors(descriptors_needed(settings))
    store = await HelperStore.connect(settings.store, run_migrations=settings.migrates_on_start)
    core = CoreClient.of_worker(settings)
    chat = ChatClient.of_worker(settings)
    results = ResultDirectories(settings.results_dir)
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=WORKFLOWS,
        workflow_runner=WORKFLOW_RUNNER,
        activities=activities_of(store, results, core, chat, settings),  # type: ignore[arg-type]
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        max_concurrent_activities=settings.max_concurrent_activities,
        max_cached_workflows=CACHED_WORKFLOWS,
        interceptors=[AdmissionRefusals()],  # counts refused admissions outside the workflow code (no replays)
        deployment_config=deployment_of(settings),
    )
    takeover = Takeover()
    follows = follows_worker(client, settings, SessionActivities(store, core, results, takeover))
    try:
        # /metrics on the health port: the application's metrics, with the store-derived gauges of this task queue.
        gauges = StoreGauges(store, settings.task_queue)
        async with (
            worker,
            follows,
            serving_health(settings.health_bind, store, client, gauges),
            restarting_lost_follows(client, store, takeover),
        ):
            try:
                if settings.promote_build:
                    await promote(client, settings)
                yield worker
            finally:
                # Both at once, so a stopping worker spends its grace once, not once per queue.
                await asyncio.gather(follows.shutdown(), worker.shutdown())
    finally:
        await core.aclose()
        await chat.aclose()
        await store.close()


def worker_client(client: Client) -> Client:
    """The client the workers poll with: the given one, but a payload it cannot read becomes a marker the workflow
    refuses, where a raise would fail the workflow task and the server would retry it for ever (codec.encryption)."""
    converter = of_worker(client.data_converter)
    if converter is client.data_converter:
        return client
    config = client.config()
    config["data_converter"] = converter
    return Client(**config)


def follows_worker(client: Client, settings: Settings, session: SessionActivities) -> Worker:
    """The worker of the follows' own task queue, in the same process and build as the main one: a PINNED
    helper's follow runs on its own build like the rest of its activities."""
    return Worker(
        client,
        task_queue=follows_task_queue(settings.task_queue),
        activities=[session.follow_session],
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        max_concurrent_activities=settings.max_concurrent_follows,
        deployment_config=deployment_of(settings),
    )


def descriptors_needed(settings: Settings) -> int:
    """File descriptors a full worker may hold: a connection to the core for every activity and follow slot, one
    to the chat for every short activity slot, and the rest (DESCRIPTORS_BESIDE_CONNECTIONS)."""
    return settings.max_concurrent_follows + 2 * settings.max_concurrent_activities + DESCRIPTORS_BESIDE_CONNECTIONS


def descriptor_limit_plan(needed: int, soft: int, hard: int) -> tuple[int | None, str | None]:
    """The soft RLIMIT_NOFILE to set (None: leave it) and a warning to log (None: none). The soft limit is raised
    as far as the hard one allows; a hard limit below the need is the operator's to raise."""
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or soft >= needed:
        return None, None
    if hard == unlimited or hard >= needed:
        return needed, None
    warning = (
        f"the process may open {hard} files (hard RLIMIT_NOFILE) but a full worker needs about {needed}: raise the "
        "limit (ulimit -n, the container runtime's nofile) or lower HELPER_MAX_CONCURRENT_FOLLOWS"
    )
    return (hard if hard > soft else None), warning


def ensure_descriptors(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    new_soft, warning = descriptor_limit_plan(needed, soft, hard)
    if new_soft is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
        log.info("file descriptor limit raised from %d to %d (a full worker needs about %d)", soft, new_soft, needed)
    if warning is not None:
        log.warning(warning)


def deployment_of(settings: Settings) -> WorkerDeploymentConfig:
    """The build this worker polls as (Worker Versioning): helpers, Goal checks and sweeps stay on the build they
    started on; a coordinator moves to the current build when it continues as new (docs/operations.md)."""
    version = WorkerDeploymentVersion(deployment_name=settings.deployment_name, build_id=settings.build_id)
    return WorkerDeploymentConfig(version=version, use_worker_versioning=True)


async def promote(client: Client, settings: Settings) -> None:
    """Make this worker's build the deployment's current version, so new workflows start on it. The server refuses
    until it has seen the build poll, so this asks again for up to PROMOTE_WITHIN_S. A server without Worker
    Versioning (the time-skipping test server) starts every workflow on whichever worker polls: nothing to do."""
    request = SetWorkerDeploymentCurrentVersionRequest(
        namespace=client.namespace,
        deployment_name=settings.deployment_name,
        build_id=settings.build_id,
        identity=client.identity,
    )
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + PROMOTE_WITHIN_S
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(request)
            return
        except RPCError as error:
            if error.status is RPCStatusCode.UNIMPLEMENTED:
                log.info("this Temporal server has no Worker Versioning: %s", error.message)
                return
            if loop.time() >= give_up_at:
                raise RuntimeError(
                    f"build {settings.build_id} of {settings.deployment_name} could not be made current: {error}"
                ) from error
            await asyncio.sleep(0.2)


def _runtime(settings: Settings) -> Runtime | None:
    """With HELPER_METRICS_BIND (e.g. 0.0.0.0:9464) the SDK's worker metrics are served for Prometheus; the
    application's own (`helper_runtime_*`) are on HELPER_HEALTH_BIND's /metrics (replica/health.py)."""
    if not settings.metrics_bind:
        return None
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=settings.metrics_bind)))


async def serve(settings: Settings) -> None:
    # Before connecting: the client carries the tracing interceptor.
    tracing.install(settings.tracing_enabled, settings.tracing_name("helper-worker"))
    client = await connect_for(settings, _runtime(settings))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await ensure_sweep_schedule(client, settings.task_queue)
    async with running_worker(client, settings), watching_pauses(), keeping_the_heap():
        log.info(
            "worker polling %s and %s on %s",
            settings.task_queue,
            follows_task_queue(settings.task_queue),
            settings.temporal_address,
        )
        await stop.wait()
        log.info("worker stopping")


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    # httpx logs a line at INFO for every call of the worker's clients: failures are logged where they happen.
    logging.getLogger("httpx").setLevel(logging.WARNING)


EXIT_CODES = (
    (0, "stopped (SIGTERM or Ctrl-C): it stopped polling and its activities finished or were handed over"),
    (1, "failed: Temporal, the store or a listener could not be reached or opened (the log says which)"),
    (2, "invalid: a variable's value (the message names it) or the command line"),
)


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line: no arguments but --help, which reads no variable and connects to nothing."""
    parser = argparse.ArgumentParser(
        prog="helper-worker",
        description=help_text.paragraph(
            "The worker: polls the helpers' task queues on Temporal and runs their workflows and activities until "
            "SIGTERM or Ctrl-C. Configured by the environment alone; run more replicas to take more helpers."
        ),
        epilog="\n\n".join(
            [
                help_text.environment(
                    tree_variables(without=("service", "codec")),
                    temporal_client=True,
                    notes=["A bad value of any variable of the settings stops it before it connects (exit 2)."],
                ),
                help_text.exit_codes(EXIT_CODES),
            ]
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    parse_arguments(argv)
    try:
        settings = Settings.from_env()
        configure_logging(settings.logging.level)
        for retired in retired_variables_set():
            log.warning(retired)
        codec_from(settings.codec_keys, settings.codec_key_id)  # a bad key stops the worker at once
        if problem := settings.encryption_problem():
            raise CodecError(problem)
    except (SettingsError, CodecError) as error:
        print(error, file=sys.stderr)
        os._exit(2)
    code = 0
    try:
        run_event_loop(serve(settings))
    except Exception:
        log.exception("worker failed")
        code = 1
    tracing.shutdown()  # export the last spans, bounded (FLUSH_TIMEOUT_MS); a no-op unless tracing is on
    sys.stdout.flush()
    sys.stderr.flush()
    # sdk-python#300: the interpreter can crash at exit after a worker ran; skip the teardown.
    os._exit(code)


if __name__ == "__main__":
    main()
