"""The worker: runs the coordinator and helper workflows and their activities. `python worker.py`.

Configuration comes from the environment (see docs/configuration.md). In Kubernetes run N replicas;
on SIGTERM the worker stops polling, lets running activities finish or heartbeat their cancellation,
and Temporal hands the rest to the other replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Coroutine
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    Worker,
    WorkerDeploymentConfig,
    WorkerDeploymentVersion,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxRestrictions

from activities.admission import AdmissionActivities
from activities.chat import ChatActivities
from activities.ending import EndingActivities
from activities.goals import GoalActivities
from activities.notices import tell_finished
from activities.rows import RowActivities
from activities.session import SessionActivities
from clients.chat_client import ChatClient
from clients.core_client import CoreClient
from codec.encryption import CodecError, codec_from
from config.settings import Settings, SettingsError
from health import serving_health
from observability import tracing
from observability.refusals import AdmissionRefusals
from observability.store_gauges import StoreGauges
from protocol.connection import connect_for
from store.helper_store import HelperStore
from store.results import ResultDirectories
from worker_sandbox import sandbox_runner
from workflows.coordinator import CoordinatorWorkflow
from workflows.goal_check import GoalCheckWorkflow
from workflows.helper import HelperWorkflow
from workflows.maintenance import SweepWorkflow, ensure_sweep_schedule
from workflows.versioned import VERSIONED_WORKFLOWS

log = logging.getLogger("helper.worker")

WORKFLOWS = [CoordinatorWorkflow, HelperWorkflow, GoalCheckWorkflow, SweepWorkflow]

# The sandbox re-imports every module not passed through for each new workflow run: about 8 ms of CPU per helper
# and per coordinator run, most of a short helper's sandbox cost. Our workflow modules and the layers below them
# keep no module-level state (constants only) and are deterministic, so they are shared between runs; the sandbox
# still gives each run its own instance and restricts builtins. The replay tests (tests/replay) and
# tests/unit/test_worker_sandbox.py run the same workflows under the full default sandbox, which still catches
# a non-deterministic call in workflow code.
DETERMINISTIC_LAYERS = ("workflows", "domain", "protocol", "contracts", "config")
WORKFLOW_RUNNER = sandbox_runner(SandboxRestrictions.default.with_passthrough_modules(*DETERMINISTIC_LAYERS))


def workflow_runner(settings: Settings) -> WorkflowRunner:
    """The sandbox (worker_sandbox.SandboxRunner), unless HELPER_WORKFLOW_SANDBOX=false. Since the runner compiles
    its calls once and asks for serialization contexts directly, turning it off saves nothing measurable
    (bench.helper_rate: 89.0 ms with it, 89.6 ms without, per quick helper) and loses the guard against a
    non-deterministic call in workflow code; the tests' workers keep the sandbox, and the replay tests and
    tests/unit/test_worker_sandbox.py put every workflow through the full default sandbox."""
    return WORKFLOW_RUNNER if settings.workflow_sandbox else UnsandboxedWorkflowRunner()


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    """uvloop's event loop where it installs (not on Windows): about 7 % less worker CPU per helper."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def activities_of(
    store: HelperStore, results: ResultDirectories, core: CoreClient, chat: ChatClient, settings: Settings
) -> list[object]:
    admission = AdmissionActivities(store, results)
    rows = RowActivities(store, results, settings.policy.keep_ms)
    session = SessionActivities(store, core, results)
    ending = EndingActivities(rows, session)
    chat_activities = ChatActivities(store, chat)
    goals = GoalActivities(settings)
    return [
        admission.admit_helper,
        admission.regrant_helper,
        rows.remove_rows,
        rows.sweep_orphan_directories,
        rows.mark_closed,
        rows.finalize_outcome,
        ending.finalize_and_hand_back,
        rows.coordinator_write,
        session.open_session,
        session.follow_session,
        session.finish_session,
        session.cancel_session,
        session.reset_session,
        session.recover_session,
        session.reset_kept_sessions,
        tell_finished,
        chat_activities.offer_chat_event,
        chat_activities.withdraw_chat_event,
        goals.start_goal_check,
    ]


@contextlib.asynccontextmanager
async def running_worker(client: Client, settings: Settings) -> AsyncIterator[Worker]:
    """A started worker with its store and HTTP clients; everything is closed on exit."""
    store = await HelperStore.connect(settings.store_url, run_migrations=settings.migrates_on_start)
    core = CoreClient(settings.core_url, settings.policy.check_ms)
    chat = ChatClient(settings.chat_url, settings.policy.check_ms)
    results = ResultDirectories(settings.results_dir)
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=WORKFLOWS if settings.build_id is None else VERSIONED_WORKFLOWS,  # with their versioning behaviour
        workflow_runner=workflow_runner(settings),
        activities=activities_of(store, results, core, chat, settings),  # type: ignore[arg-type]
        graceful_shutdown_timeout=timedelta(seconds=10),
        max_concurrent_activities=settings.max_concurrent_activities,
        # Heartbeats go out every 80 % of an activity's heartbeat timeout; the SDK caps that at 60 s unless
        # told otherwise. The follow's 110 s timeout (HELPER_FOLLOW_LIVENESS_MS) then sends one every 88 s:
        # a 45-minute helper's heartbeats are billable actions, and 32 of them fit its budget of 60 (R44).
        max_heartbeat_throttle_interval=timedelta(seconds=96),
        interceptors=[AdmissionRefusals()],  # counts refused admissions outside the workflow code (no replays)
        deployment_config=deployment_of(settings),
    )
    try:
        # /metrics on the health port: the application's metrics, with the store-derived gauges of this task queue.
        gauges = StoreGauges(store, settings.task_queue)
        async with worker, serving_health(settings.health_bind, store, client, gauges):
            yield worker
    finally:
        await core.aclose()
        await chat.aclose()
        await store.close()


def deployment_of(settings: Settings) -> WorkerDeploymentConfig | None:
    """Worker Versioning when HELPER_DEPLOYMENT_NAME and HELPER_BUILD_ID are set: helpers stay pinned to the
    build they started on, the coordinator moves to the current one (workflows/versioned.py); see
    docs/operations.md, "Rollout and rollback". Unset: an unversioned worker, as before."""
    if settings.deployment_name is None or settings.build_id is None:
        return None
    version = WorkerDeploymentVersion(deployment_name=settings.deployment_name, build_id=settings.build_id)
    return WorkerDeploymentConfig(version=version, use_worker_versioning=True)


def _runtime(settings: Settings) -> Runtime | None:
    """With HELPER_METRICS_BIND (e.g. 0.0.0.0:9464) the SDK's worker metrics are served for Prometheus; the
    application's own (`helper_runtime_*`) are on HELPER_HEALTH_BIND's /metrics (health.py)."""
    if not settings.metrics_bind:
        return None
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=settings.metrics_bind)))


async def serve(settings: Settings) -> None:
    tracing.install(settings, "helper-worker")  # before connecting: the client carries the tracing interceptor
    client = await connect_for(settings, _runtime(settings))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await ensure_sweep_schedule(client, settings.task_queue)
    async with running_worker(client, settings):
        log.info("worker polling %s on %s", settings.task_queue, settings.temporal_address)
        await stop.wait()
        log.info("worker stopping")


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    # The worker's clients (aiohttp) log no line per call; httpx would log one at INFO for each call of the
    # reference core's OpenAI-compatible model where it runs in this process. Failures are logged where they
    # happen.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def main() -> None:
    configure_logging(os.environ.get("HELPER_LOG_LEVEL", "INFO"))
    try:
        settings = Settings.from_env()
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
