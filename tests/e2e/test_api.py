"""R47, R27, R28, R4: the starter's HTTP service on the real stack (dev server, worker, reference core and chat),
driven by clients we did not write: Node.js's built-in fetch, as Iva (a TypeScript service) calls it, and a
property-based fuzz of the OpenAPI document (schemathesis) that finds no 5xx and no contract violation."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import shutil
import ssl
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from config.settings import ServiceSettings, Settings
from reference.core.script import scripted_task
from starter.service.app import create_app, with_guards
from starter.service.connections import Connections
from tests.e2e.conftest import Stack
from tests.helpers import eventually, free_port, rows_of

HERE = Path(__file__).resolve().parent
NODE = shutil.which("node")
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
STARTER = Path(sys.executable).parent / "helper-starter"


@contextlib.asynccontextmanager
async def serving_api(stack: Stack, settings: Settings | None = None, **service: Any) -> AsyncIterator[str]:
    """The service on a free loopback port, on the stack's Temporal client and store (with `settings` instead of the
    stack's, if given), until the block ends."""
    options = ServiceSettings(bind=f"127.0.0.1:{free_port()}", **service)
    settings = (settings or stack.settings).model_copy(update={"service": options})
    app = create_app(settings, Connections(settings, 4, temporal=stack.env.client))
    config = uvicorn.Config(with_guards(app, options), host=options.host, port=options.port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    url = f"http://{options.bind}"
    try:
        async with httpx.AsyncClient(timeout=5) as client:

            async def live() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    return (await client.get(f"{url}/livez")).status_code == 200
                return False

            await eventually(live, timeout=20)
        yield url
    finally:
        app.state.service.stop()
        server.should_exit = True
        await asyncio.wait_for(task, 30)


async def _run(*command: str, timeout: float) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return int(process.returncode or 0), out.decode(), err.decode()


@pytest.mark.skipif(NODE is None, reason="node is not installed")
async def test_iva_drives_the_service_from_node_fetch(stack: Stack) -> None:
    """Start, the same start again, an invalid start, a watch that ends with the outcome (and the same watch resumed
    after a line, R49), list, unreported, read, delivered and close, each answered as the console script answers
    (R4, R5, R27, R28, R23); then a helper that asks a structured question, answered once (R49)."""
    assert NODE is not None
    question = scripted_task(
        "Plan the offsite.",
        steps=1,
        step_ms=50,
        end="question",
        question="Where?",
        question_id="venue",
        options=[("walk", "Walking distance"), ("taxi", "Taxi")],
    )
    async with serving_api(stack) as url:
        code, out, err = await _run(
            NODE, str(HERE / "iva_fetch.mjs"), url, stack.owner, "report-q3", question, timeout=120
        )
    assert code == 0, err
    answers = json.loads(out)

    assert answers["start"]["status"] == 201
    assert answers["start"]["body"]["helper_id"] == "report-q3" and answers["start"]["body"]["existing"] is False
    assert answers["again"]["status"] == 200 and answers["again"]["body"]["existing"] is True
    assert answers["invalid"]["status"] == 422
    assert answers["invalid"]["body"]["error"]["code"] == "invalid_request"

    watch = answers["watch"]
    assert watch["status"] == 200 and watch["contentType"].startswith("text/event-stream")
    lines = [event["data"]["text"] for event in watch["events"] if event["event"] == "line"]
    assert lines[0].startswith("admitted")
    assert watch["events"][-1] == {"event": "end", "data": {"reason": "outcome", "outcome_kind": "completed"}}
    # Resumed with the id of the line before the outcome's (Last-Event-ID): exactly the lines after it, the same
    # ids, then the same end.
    ids = [event.get("id") for event in watch["events"]]
    after = ids.index(answers["resumedFrom"]) + 1
    assert [(e["event"], e.get("id"), e["data"].get("text")) for e in answers["resumed"]["events"]] == [
        (e["event"], e.get("id"), e["data"].get("text")) for e in watch["events"][after:]
    ]

    assert [view["helper_id"] for view in answers["list"]["body"]] == ["report-q3"]
    assert [view["helper_id"] for view in answers["unreported"]["body"]] == ["report-q3"]
    assert answers["unreported"]["body"][0]["summary"]
    assert answers["read"]["status"] == 200
    assert answers["delivered"] == {
        "status": 200,
        "body": {"owner": stack.owner, "turn": "turn-1", "delivered": ["report-q3"]},
    }
    assert answers["close"]["status"] == 200 and answers["close"]["body"]["removed"] is True
    assert answers["after"] == {"status": 200, "body": []}

    assert answers["ask"]["status"] == 201
    assert answers["asked"]["events"][-1]["data"]["outcome_kind"] == "question"
    answered = answers["answer"]
    assert answered["status"] == 200, answered
    assert (answered["body"]["option_id"], answered["body"]["repeated"]) == ("walk", False)
    assert answered["body"]["follow_up"]["helper_id"] == "report-q3-ask.answer"


@pytest.mark.skipif(NODE is None, reason="node is not installed")
async def test_iva_reads_busy_and_unavailable_from_node_fetch(stack: Stack) -> None:
    """R48, R47: three starts at once from Node's fetch to a service that sends one write at a time to a task queue
    no worker polls: the first is 503 `unavailable`, the others 429 `busy`, each with a Retry-After and the same in
    its body, all within the bound, and nothing was admitted."""
    assert NODE is not None
    unserved = stack.settings.model_copy(
        update={"task_queue": "nobody-polls-this", "starter_timeout_ms": 2_000, "starter_max_in_flight": 1}
    )
    async with serving_api(stack, unserved) as url:
        code, out, err = await _run(NODE, str(HERE / "iva_fetch.mjs"), url, stack.owner, "q", "refusals", timeout=60)
    assert code == 0, err
    starts = json.loads(out)["starts"]
    assert sorted(start["status"] for start in starts) == [429, 429, 503], starts
    for start in starts:
        error = start["body"]["error"]
        assert error["code"] == {429: "busy", 503: "unavailable"}[start["status"]]
        assert int(start["retryAfter"]) == error["retry_after_s"] >= 1
        assert "nothing was taken" in error["message"]
    assert await rows_of(stack.store, stack.owner) == []


async def test_the_service_refuses_a_caller_without_its_token_on_the_real_stack(stack: Stack) -> None:
    """R34, R47: without the token nothing is admitted; with it, the same request is."""
    token = "a-service-token-for-this-test"
    body = {"helper_id": "h-token", "model": "scripted", "task": "Find the Q3 report"}
    async with serving_api(stack, token=token) as url, httpx.AsyncClient(timeout=30) as client:
        refused = await client.post(f"{url}/v1/owners/{stack.owner}/helpers", json=body)
        assert refused.status_code == 401
        assert await stack.store.get(stack.owner, "h-token") is None
        admitted = await client.post(
            f"{url}/v1/owners/{stack.owner}/helpers", json=body, headers={"authorization": f"Bearer {token}"}
        )
        assert admitted.status_code == 201
        assert await stack.store.get(stack.owner, "h-token") is not None


@pytest.mark.slow
async def test_a_fuzz_of_the_openapi_document_finds_no_5xx_and_no_contract_violation(stack: Stack) -> None:
    """schemathesis generates requests from docs/api/openapi.json (valid and invalid) against the service on the
    real stack: every answer is documented, in its documented shape and content type, and none is a 5xx.
    Acceptance of schema-valid data is not checked: it depends on the runtime's state (the core's model catalog,
    the boundary's grammar, an existing helper), which the document states but cannot express."""
    async with serving_api(stack, watch_max_ms=1_000) as url:
        code, out, err = await _run(
            str(SCHEMATHESIS),
            "run",
            f"{url}/openapi.json",
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--max-examples",
            "15",
            "--workers",
            "1",
            "--request-timeout",
            "40",
            "--seed",
            "47",
            timeout=600,
        )
    assert code == 0, out[-6000:] + err[-2000:]


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as an operator's HELPER_API_TLS_CERT and HELPER_API_TLS_KEY."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "helper-starter test")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "api.crt", folder / "api.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


async def test_the_service_speaks_https_only_when_configured_with_a_certificate(stack: Stack, tmp_path: Path) -> None:
    """R47: `helper-starter serve` with HELPER_API_TLS_CERT and HELPER_API_TLS_KEY answers over HTTPS to a client
    that trusts the certificate, and only there: plain HTTP on its port gets no answer, a client that does not
    trust it does not connect, and the token is still required inside TLS."""
    cert, key = _self_signed(tmp_path)
    port = free_port()
    token = "a-service-token-for-the-https-test"
    environment = {
        **{name: value for name, value in os.environ.items() if not name.startswith(("HELPER_", "TEMPORAL_"))},
        "HELPER_ENV_FILE": os.devnull,
        "TEMPORAL_ADDRESS": stack.settings.temporal_address,
        "HELPER_TASK_QUEUE": stack.settings.task_queue,
        "HELPER_STORE_URL": stack.settings.store.text,
        "HELPER_RESULTS_DIR": str(stack.settings.results_dir),
        "HELPER_CORE_URL": stack.settings.core_url,
        "HELPER_CHAT_URL": stack.settings.chat_url,
        "HELPER_CODEC_REQUIRED": "false",
        "HELPER_API_TLS_CERT": str(cert),
        "HELPER_API_TLS_KEY": str(key),
        "HELPER_API_TOKEN": token,
    }
    log = (tmp_path / "serve.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        str(STARTER), "serve", "--bind", f"127.0.0.1:{port}", env=environment, stdout=log, stderr=log
    )
    trusted = ssl.create_default_context(cafile=str(cert))
    https, http = f"https://127.0.0.1:{port}", f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(verify=trusted, timeout=5) as client:

            async def live() -> bool:
                assert process.returncode is None, (tmp_path / "serve.log").read_text()
                with contextlib.suppress(httpx.TransportError):
                    return (await client.get(f"{https}/livez")).status_code == 200
                return False

            await eventually(live, timeout=30)
            helpers = f"{https}/v1/owners/{stack.owner}/helpers"
            assert (await client.get(helpers)).status_code == 401
            listed = await client.get(helpers, headers={"authorization": f"Bearer {token}"})
            assert (listed.status_code, listed.json()) == (200, [])
        async with httpx.AsyncClient(timeout=5) as plain:
            with pytest.raises(httpx.TransportError):
                await plain.get(f"{http}/livez")
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await plain.get(f"{https}/livez")
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)
        log.close()
    assert process.returncode == 0, (tmp_path / "serve.log").read_text()
