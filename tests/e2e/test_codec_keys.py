"""No payload wedges an owner (R39, R52): a request the worker cannot read (another key under the runtime's key id,
a key id it lacks, plaintext, damaged ciphertext) is refused at once with a clear answer naming the key, and the
owner's next request with the right key is taken at once, new owner or existing."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.converter import PayloadCodec
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from codec.encryption import EncryptionCodec, codec_from, data_converter, new_key
from config.settings import Settings
from domain.messages.workflows import CoordinatorStart
from domain.rows import RowState
from protocol.errors import InvalidConfiguration, InvalidRequest
from protocol.names import ADMIT, COORDINATOR_WORKFLOW, coordinator_id
from starter.client import HelperClient
from starter.service.connections import Connections
from store.helper_store import HelperStore
from tests.fakes.fake_core import FakeCore, serving_fake_core
from tests.helpers import helper_request, run_bounded, service_client, settings_for
from tests.integration.stack import CLOSED_PORT
from worker import running_worker

pytestmark = pytest.mark.e2e

RUNTIME_KEYS = f"local:{new_key()}"
STARTER = Path(sys.executable).parent / "helper-starter"
# How a starter with the wrong keys got them: another stack's key under the runtime's id, or a key id the runtime
# does not have.
WRONG_KEYS = {"another key under the same id": f"local:{new_key()}", "a key id the runtime lacks": f"old:{new_key()}"}


@dataclasses.dataclass
class Runtime:
    env: WorkflowEnvironment
    settings: Settings
    store: HelperStore
    right: HelperClient
    tag: str  # the dev server outlives a test: each test's owners are its own

    def owner(self, name: str) -> str:
        return f"{name}-{self.tag}"

    def client_with(self, codec: PayloadCodec | None) -> Client:
        return Client(
            self.env.client.service_client, namespace=self.env.client.namespace, data_converter=data_converter(codec)
        )

    def starter_with(self, keys: str) -> HelperClient:
        codec = codec_from(keys, None)
        settings = self.settings.model_copy(update={"codec_keys": keys, "codec_key_id": None})
        return HelperClient(settings, self.store.reads, self.client_with(codec))


@pytest.fixture
async def runtime(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Runtime]:
    async with serving_fake_core(FakeCore()) as core_url:
        settings = settings_for(tmp_path, core_url, CLOSED_PORT).model_copy(update={"codec_keys": RUNTIME_KEYS})
        store = await HelperStore.connect(settings.store, run_migrations=True)
        keyed = Client(
            dev_env.client.service_client,
            namespace=dev_env.client.namespace,
            data_converter=data_converter(codec_from(RUNTIME_KEYS, None)),
        )
        try:
            async with running_worker(keyed, settings):
                right = HelperClient(settings, store.reads, keyed)
                yield Runtime(dev_env, settings, store, right, uuid.uuid4().hex[:8])
        finally:
            await store.close()


async def _admitted(runtime: Runtime, owner: str, helper_id: str) -> None:
    """The right key's request is taken at once: within the starter's own bound, which a wedged coordinator
    (a workflow task failing for ever) never meets."""
    admission = await runtime.right.start(helper_request(owner, helper_id))
    assert admission.helper_id == helper_id
    row = await runtime.store.get(owner, helper_id)
    assert row is not None and row.state in (RowState.WAITING, RowState.RUNNING)


@pytest.mark.parametrize("wrong", WRONG_KEYS.values(), ids=WRONG_KEYS.keys())
async def test_a_request_with_the_wrong_key_is_refused_naming_it_and_the_owner_goes_on(
    runtime: Runtime, wrong: str
) -> None:
    """A starter with other keys is told its keys differ from the runtime's, naming the key id: exit 2
    `invalid_configuration`, not "is a worker polling" nor "retry in 1 s"; nothing is written; and the owner's next
    request with the right key is taken at once, whether the wrong one was that owner's first or not."""
    stale = runtime.starter_with(wrong)
    await _admitted(runtime, runtime.owner("anna"), "first")
    for owner in (runtime.owner("zed"), runtime.owner("anna")):  # a new owner, then one whose coordinator exists
        with pytest.raises(InvalidConfiguration, match="'local'") as refused:
            await stale.start(helper_request(owner, "stale"))
        assert refused.value.exit_code == 2 and "HELPER_CODEC_KEYS" in refused.value.message
        assert await runtime.store.get(owner, "stale") is None
        await _admitted(runtime, owner, "next")


async def test_the_console_script_and_the_api_say_which_key(runtime: Runtime, tmp_path: Path) -> None:
    """Through `helper-starter start` and `POST .../helpers` with another key under the runtime's id: exit 2 and
    HTTP 500 `invalid_configuration` (the service's own settings are wrong), each naming the key id; the owner is
    served at once with the right key."""
    wrong = WRONG_KEYS["another key under the same id"]
    environment = {
        **{name: value for name, value in os.environ.items() if not name.startswith(("HELPER_", "TEMPORAL_"))},
        "HELPER_ENV_FILE": os.devnull,
        "TEMPORAL_ADDRESS": runtime.env.client.service_client.config.target_host,
        "HELPER_TASK_QUEUE": runtime.settings.task_queue,
        "HELPER_STORE_URL": runtime.settings.store.text,
        "HELPER_CORE_URL": runtime.settings.core_url,
        "HELPER_CODEC_KEYS": wrong,
    }
    command = (str(STARTER), "start", "--owner", runtime.owner("cli"), "--id", "h1", "--task", "Find the Q3 report")
    code, out, err = await run_bounded(*command, "--model", "scripted", timeout=60, env=environment)
    error = json.loads(out)["error"]
    assert (code, error["code"]) == (2, "invalid_configuration"), out + err
    assert "'local'" in error["message"] and "retry_after_s" not in error
    await _admitted(runtime, runtime.owner("cli"), "h1")

    settings = runtime.settings.model_copy(update={"codec_keys": wrong})
    stale = runtime.starter_with(wrong)
    async with service_client(settings, Connections(settings, 1, temporal=stale.temporal)) as api:
        answer = await api.post(
            f"/v1/owners/{runtime.owner('api')}/helpers", json={"helper_id": "h1", "task": "Find", "model": "scripted"}
        )
    assert answer.status_code == 500, answer.text
    assert answer.json()["error"]["code"] == "invalid_configuration" and "'local'" in answer.json()["error"]["message"]
    await _admitted(runtime, runtime.owner("api"), "h1")


class _Damaging(PayloadCodec):
    """The runtime's key, but every ciphertext damaged on the way: what a broken or hostile client sends."""

    def __init__(self, codec: EncryptionCodec) -> None:
        self.codec = codec

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        encoded = await self.codec.encode(payloads)
        return [Payload(metadata=p.metadata, data=p.data[:-1] + bytes([p.data[-1] ^ 1])) for p in encoded]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.codec.decode(payloads)


async def test_damaged_ciphertext_is_an_invalid_request(runtime: Runtime) -> None:
    """A request whose ciphertext does not decrypt with the runtime's own key is refused as invalid (exit 2,
    naming the key), for a new owner and an existing one, and the right request is taken at once."""
    codec = codec_from(RUNTIME_KEYS, None)
    assert codec is not None
    damaged = HelperClient(runtime.settings, runtime.store.reads, runtime.client_with(_Damaging(codec)))
    await _admitted(runtime, runtime.owner("anna"), "first")
    for owner in (runtime.owner("zed"), runtime.owner("anna")):
        with pytest.raises(InvalidRequest, match="does not decrypt with key 'local'"):
            await damaged.start(helper_request(owner, "damaged"))
        await _admitted(runtime, owner, "next")


async def test_plaintext_from_a_client_without_keys_wedges_nobody(runtime: Runtime) -> None:
    """A client with no keys at all sends an update-with-start in clear: it is refused, and the owner's next request
    with the keys is taken at once."""
    plain, owner = runtime.client_with(None), runtime.owner("pat")
    start: WithStartWorkflowOperation[None, None] = WithStartWorkflowOperation(
        COORDINATOR_WORKFLOW,
        CoordinatorStart(owner=owner),
        id=coordinator_id(owner),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        task_queue=runtime.settings.task_queue,
    )
    with pytest.raises((WorkflowUpdateFailedError, RPCError, KeyError, ValueError)):
        await plain.execute_update_with_start_workflow(
            ADMIT, helper_request(owner, "plain"), start_workflow_operation=start
        )
    assert await runtime.store.get(owner, "plain") is None
    await _admitted(runtime, owner, "next")
