"""R47, R27, R28, R4: the starter's HTTP service on the real stack (dev server, worker, reference core and chat):
its token, its TLS, and a property-based fuzz of the OpenAPI document (schemathesis) that finds no 5xx and no
contract violation. Iva's typed TypeScript client drives the whole contract in test_typescript_client.py."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
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
from starter.service.app import create_app, with_guards
from starter.service.connections import Connections
from tests.e2e.conftest import Stack
from tests.helpers import eventually, free_port, run_bounded

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
        code, out, err = await run_bounded(
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
