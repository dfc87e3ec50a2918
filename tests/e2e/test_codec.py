"""Personal content in Temporal histories is encrypted, and the codec server shows it to whoever may read it."""

from __future__ import annotations

import asyncio
import base64
import functools
import uuid
from collections.abc import Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from temporalio import workflow
from temporalio.api.common.v1 import Payload, Payloads, SearchAttributes
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import DescribeScheduleRequest
from temporalio.client import Client
from temporalio.exceptions import ActivityError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.workflow import ActivityCancellationType

from codec.encryption import (
    ENCODING,
    SERVER_NOT_STARTED,
    EncryptionCodec,
    UnreadablePayload,
    codec_from,
    data_converter,
    new_key,
)
from codec.server import create_app
from domain.messages.workflows import HelperStart
from domain.rows import RowState
from protocol.names import coordinator_id, helper_workflow_id
from reference.chat.server import running_chat
from reference.core.script import scripted_task
from reference.core.server import running_core, serving
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.e2e.conftest import E2E_FOLLOW
from tests.helpers import eventually, helper_request, history_events, settings_for
from worker import running_worker
from workflows.maintenance import ensure_sweep_schedule

pytestmark = pytest.mark.e2e

SECRET = "heliotrope"


async def test_histories_hold_only_ciphertext_and_the_codec_server_decodes_for_the_token(
    dev_env: WorkflowEnvironment, tmp_path: Path
):
    """R18, R33: with codec keys set, the task, the outcome and every other payload reach Temporal
    encrypted (AES-256-GCM): the raw histories never contain the text. The codec server, given the bearer
    token, turns a payload from the history back into the text for the Web UI, and refuses without it."""
    keys = f"k1:{new_key()}"
    codec = codec_from(keys, "k1")
    assert isinstance(codec, EncryptionCodec)
    client = Client(
        dev_env.client.service_client, namespace=dev_env.client.namespace, data_converter=data_converter(codec)
    )
    task = scripted_task(f"Pass phrase {SECRET}: file it.", steps=1, step_ms=20, final_text=f"Filed {SECRET}.")
    async with running_core(tmp_path / "core.sqlite3") as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, follow=E2E_FOLLOW).model_copy(
            update={"codec_keys": keys, "codec_key_id": "k1"}
        )
        store = await HelperStore.connect(settings.store, run_migrations=True)
        async with running_worker(client, settings):
            helpers = HelperClient(settings, store.reads, client)
            await helpers.start(helper_request("kim", "secret", task))
            row = await eventually(functools.partial(_final, store), timeout=30)
            assert SECRET in (row.summary or "")  # the store, Iva's side, holds the text
        await store.close()

    raw = [
        await dev_env.client.get_workflow_handle(w).fetch_history()
        for w in (helper_workflow_id("kim", "secret"), coordinator_id("kim"))
    ]
    for history in raw:
        assert SECRET.encode() not in b"".join(event.SerializeToString() for event in history.events)
    started = raw[0].events[0].workflow_execution_started_event_attributes
    payload = started.input.payloads[0]
    assert payload.metadata["encoding"] == ENCODING

    token = "let-me-read"
    app = create_app(codec, allowed_origins=["http://127.0.0.1:8233"], token=token)
    body = json_format.MessageToJson(Payloads(payloads=[payload]))
    async with serving(app) as codec_url, httpx.AsyncClient() as http:
        refused = await http.post(f"{codec_url}/decode", content=body, headers={"X-Namespace": "default"})
        assert refused.status_code == 401
        answer = await http.post(
            f"{codec_url}/decode",
            content=body,
            headers={"X-Namespace": "default", "Authorization": f"Bearer {token}", "Origin": "http://127.0.0.1:8233"},
        )
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == "http://127.0.0.1:8233"
        decoded = json_format.Parse(answer.text, Payloads()).payloads[0]
        assert decoded.metadata["encoding"] == b"json/plain"
        assert b"kim" in decoded.data and base64.b64encode(decoded.data)


async def test_no_payload_of_ours_reaches_the_server_in_clear(dev_env: WorkflowEnvironment, tmp_path: Path):
    """R39: with codec keys, every payload our code hands to Temporal is encrypted: read raw from the server, every
    payload of a helper's history (started, closed while it runs, so its follow is cancelled), of its coordinator's,
    and of the sweep schedule has the encrypted encoding, but what Temporal writes itself (`_written_by_temporal`).
    Search attributes stay readable by design: the server indexes them (the owner and the helper's state, never
    the task or the outcome)."""
    keys = f"k1:{new_key()}"
    client = Client(
        dev_env.client.service_client,
        namespace=dev_env.client.namespace,
        data_converter=data_converter(codec_from(keys, "k1")),
    )
    task = scripted_task(f"Pass phrase {SECRET}: wait.", steps=50, step_ms=200, final_text="never")
    async with running_core(tmp_path / "core.sqlite3") as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, follow=E2E_FOLLOW).model_copy(
            update={"codec_keys": keys, "codec_key_id": "k1", "starter_timeout_ms": 30_000}
        )
        store = await HelperStore.connect(settings.store, run_migrations=True)
        async with running_worker(client, settings):
            await ensure_sweep_schedule(client, settings.task_queue)
            helpers = HelperClient(settings, store.reads, client)
            await helpers.start(helper_request("lee", "clear", task))
            await eventually(functools.partial(_in_state, store, RowState.RUNNING), timeout=30)
            await helpers.close("lee", "clear")
            await eventually(functools.partial(_in_state, store, RowState.CLOSED), timeout=30)
        await store.close()

    found: list[tuple[str, Payload]] = []
    for workflow_id in (helper_workflow_id("lee", "clear"), coordinator_id("lee")):
        for event in await history_events(dev_env.client, workflow_id):
            found += [(f"{workflow_id} {EventType.Name(event.event_type)}.{path}", p) for path, p in _payloads(event)]
    schedule = await dev_env.client.workflow_service.describe_schedule(
        DescribeScheduleRequest(
            namespace=dev_env.client.namespace, schedule_id=f"helpers/maintenance/{settings.task_queue}/sweep-orphans"
        )
    )
    found += [(f"schedule.{path}", p) for path, p in _payloads(schedule)]
    assert schedule.schedule.action.start_workflow.workflow_type.name  # its start action, with any input, is read
    clear = [
        (where, payload.metadata.get("encoding"), payload.data[:80])
        for where, payload in found
        if payload.metadata.get("encoding") != ENCODING and not _written_by_temporal(where, payload)
    ]
    assert clear == []
    assert SECRET.encode() not in b"".join(payload.SerializeToString() for _, payload in found)


def _written_by_temporal(where: str, payload: Payload) -> bool:
    """The plaintext payloads Temporal writes itself, not from anything of ours: the server's details of the cancel
    of an activity that had not started, and the SDK core's record of a local activity (its seq, attempt, type and
    times; the activity's result beside it, under `result`, is ours and encrypted)."""
    return payload == SERVER_NOT_STARTED or where.endswith("marker_recorded_event_attributes.details[data].payloads")


def _payloads(message: Message, path: str = "") -> Iterator[tuple[str, Payload]]:
    """Every payload in a protobuf message, with its path; search attributes left out (the server indexes them)."""
    if isinstance(message, Payload):
        yield path, message
        return
    if isinstance(message, SearchAttributes):
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        name = f"{path}.{field.name}" if path else field.name
        if field.message_type.GetOptions().map_entry:
            items: Iterable[tuple[str, Any]] = ((f"{name}[{key}]", item) for key, item in value.items())
        elif field.is_repeated:
            items = ((name, item) for item in value)
        else:
            items = [(name, value)]
        for where, item in items:
            if isinstance(item, Message):
                yield from _payloads(item, where)


async def _in_state(store: HelperStore, state: RowState):
    row = await store.get("lee", "clear")
    return row if row is not None and row.state == state else None


async def _final(store: HelperStore):
    row = await store.get("kim", "secret")
    return row if row is not None and row.outcome_kind is not None else None


@workflow.defn(sandboxed=False)
class _CancelsAnActivityThatNeverStarted:
    @workflow.run
    async def run(self) -> str:
        # Nobody polls this queue, so the activity never starts and the server answers the cancel itself.
        task = workflow.start_activity(
            "nobody-runs-this",
            task_queue="nobody-polls-this",
            start_to_close_timeout=timedelta(seconds=30),
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        await workflow.sleep(timedelta(milliseconds=200))
        task.cancel()
        try:
            await task
        except ActivityError as error:
            return type(error.cause).__name__
        return "completed"


async def test_plaintext_the_server_writes_itself_does_not_fail_a_workflow_task(
    dev_env: WorkflowEnvironment, caplog: pytest.LogCaptureFixture
):
    """R39: the server writes its own plaintext details into the cancel of an activity that never started;
    with encryption required the workflow still sees a plain cancellation, and no warning sends anyone looking
    for a client without keys, while a typed plaintext input is still refused (a helper once stayed stuck on
    `Unknown payload encoding binary/plaintext-refused`)."""
    keyed = Client(
        dev_env.client.service_client,
        namespace=dev_env.client.namespace,
        data_converter=data_converter(codec_from(f"k1:{new_key()}", None)),
    )
    queue = f"server-plaintext-{uuid.uuid4()}"
    async with Worker(keyed, task_queue=queue, workflows=[_CancelsAnActivityThatNeverStarted]):
        handle = await keyed.start_workflow(
            _CancelsAnActivityThatNeverStarted.run, id=f"server-plaintext-{uuid.uuid4()}", task_queue=queue
        )
        result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result == "CancelledError"
    canceled = [
        event.activity_task_canceled_event_attributes.details.payloads[0]
        for event in await history_events(dev_env.client, handle.id)
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED
    ]
    assert canceled == [SERVER_NOT_STARTED]
    assert "refused an unencrypted payload" not in caplog.text
    failures = [
        event
        for event in await history_events(keyed, handle.id)
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failures == []

    codec = codec_from(f"k1:{new_key()}", None)
    assert codec is not None
    converter = data_converter(codec)
    [refused] = await codec.decode([Payload(metadata={"encoding": b"json/plain"}, data=b"{}")])
    with pytest.raises(UnreadablePayload, match="unencrypted payload was refused"):
        converter.payload_converter.from_payloads([refused], [HelperStart])
