"""The codec server over HTTP: who may read (R39), body limits, malformed input, probes and start-up refusals."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from codec.auth import Authorizer, AuthSettings
from codec.encryption import ENCODING, KEY_ID, EncryptionCodec, codec_from, new_key
from codec.server import create_app
from reference.core.server import serving
from tests.unit.test_codec_auth import STATIC_TOKEN, IdentityProvider

ORIGIN = "https://temporal-ui.example.test"
REPO = Path(__file__).resolve().parents[2]
SMALL_CAP = 2048


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    provider = IdentityProvider()
    yield provider
    provider.close()


@pytest.fixture(scope="module")
def codec() -> EncryptionCodec:
    made = codec_from(f"k1:{new_key()}", "k1", allow_plaintext=True)
    assert made is not None
    return made


def _app_client(app: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://codec")  # type: ignore[arg-type]


def _body(*payloads: Payload) -> str:
    return json_format.MessageToJson(Payloads(payloads=payloads))


def _headers(authorization: str | None, namespace: str = "default") -> dict[str, str]:
    headers = {"X-Namespace": namespace, "Content-Type": "application/json", "Origin": ORIGIN}
    if authorization is not None:
        headers["Authorization"] = authorization
    return headers


async def _sealed(codec: EncryptionCodec, text: bytes = b'"the secret"') -> Payload:
    return (await codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=text)]))[0]


@pytest.fixture
async def oidc_client(idp: IdentityProvider, codec: EncryptionCodec) -> AsyncIterator[httpx.AsyncClient]:
    authorizer = Authorizer(idp.settings(token=STATIC_TOKEN, groups=frozenset({"readers"})))
    app = create_app(codec, allowed_origins=[ORIGIN], authorizer=authorizer, max_body_bytes=SMALL_CAP)
    async with _app_client(app) as client:
        yield client


async def test_a_valid_access_token_gets_the_plaintext_back(
    oidc_client: httpx.AsyncClient, idp: IdentityProvider, codec: EncryptionCodec
) -> None:
    """R39: the Web UI's request with an allowed user's access token gets the payload decrypted (and CORS)."""
    answer = await oidc_client.post(
        "/decode", content=_body(await _sealed(codec)), headers=_headers(f"Bearer {idp.token()}")
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    decoded = json_format.Parse(answer.text, Payloads()).payloads[0]
    assert decoded.data == b'"the secret"'


async def test_an_allowed_group_and_the_static_token_may_read(
    oidc_client: httpx.AsyncClient, idp: IdentityProvider, codec: EncryptionCodec
) -> None:
    """R39: a member of an allowed group, and the CLI with the static token, both get 200."""
    body = _body(await _sealed(codec))
    by_group = await oidc_client.post("/decode", content=body, headers=_headers(f"Bearer {idp.token(sub='bob')}"))
    assert by_group.status_code == 200
    by_token = await oidc_client.post("/decode", content=body, headers=_headers(f"Bearer {STATIC_TOKEN}"))
    assert by_token.status_code == 200


async def test_encode_round_trips_through_decode(oidc_client: httpx.AsyncClient) -> None:
    """R39: /encode seals what /decode opens again, for the same reader."""
    plain = _body(Payload(metadata={"encoding": b"json/plain"}, data=b'"x"'))
    sealed = await oidc_client.post("/encode", content=plain, headers=_headers(f"Bearer {STATIC_TOKEN}"))
    assert sealed.status_code == 200
    assert json_format.Parse(sealed.text, Payloads()).payloads[0].metadata["encoding"] == ENCODING
    opened = await oidc_client.post("/decode", content=sealed.text, headers=_headers(f"Bearer {STATIC_TOKEN}"))
    assert json_format.Parse(opened.text, Payloads()).payloads[0].data == b'"x"'


async def test_without_or_with_a_bad_credential_the_answer_is_401(
    oidc_client: httpx.AsyncClient, idp: IdentityProvider, codec: EncryptionCodec
) -> None:
    """R39: no Authorization, an expired token or a wrong one is 401 with `WWW-Authenticate: Bearer` and a JSON
    error that does not echo the credential."""
    body = _body(await _sealed(codec))
    expired = idp.token(exp=int(time.time()) - 600)
    for authorization in (None, f"Bearer {expired}", "Bearer wrong-token"):
        answer = await oidc_client.post("/decode", content=body, headers=_headers(authorization))
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert answer.json()["error"]["code"] == "unauthorized"
        assert expired not in answer.text and "wrong-token" not in answer.text


async def test_a_reader_not_allowed_or_another_namespace_is_403(
    oidc_client: httpx.AsyncClient, idp: IdentityProvider, codec: EncryptionCodec
) -> None:
    """R39: a valid token of someone not allowed, or a request for a namespace not configured, is 403."""
    body = _body(await _sealed(codec))
    stranger = idp.token(sub="mallory", groups=["writers"])
    answer = await oidc_client.post("/decode", content=body, headers=_headers(f"Bearer {stranger}"))
    assert (answer.status_code, answer.json()["error"]["code"]) == (403, "forbidden")
    elsewhere = await oidc_client.post("/decode", content=body, headers=_headers(f"Bearer {idp.token()}", "other"))
    assert elsewhere.status_code == 403 and "namespace" in elsewhere.json()["error"]["message"]


async def test_a_body_over_the_cap_is_413_declared_or_streamed(oidc_client: httpx.AsyncClient) -> None:
    """R39: a body over the cap is refused with 413 from its Content-Length, and a chunked one as soon as the
    streamed bytes pass the cap: the rest is never read."""
    declared = await oidc_client.post(
        "/decode", content=b"x" * (SMALL_CAP + 1), headers=_headers(f"Bearer {STATIC_TOKEN}")
    )
    assert (declared.status_code, declared.json()["error"]["code"]) == (413, "too_large")

    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(100):
            sent += 1
            yield b"x" * 1024

    streamed = await oidc_client.post("/decode", content=chunks(), headers=_headers(f"Bearer {STATIC_TOKEN}"))
    assert streamed.status_code == 413
    assert sent <= 4  # the cap is 2 KiB: the server stopped reading right after it


async def test_a_chunked_body_over_the_cap_is_413_over_real_http(codec: EncryptionCodec) -> None:
    """R39: the same cap holds on a real uvicorn server for a chunked upload without Content-Length."""
    app = create_app(codec, allowed_origins=[ORIGIN], token=STATIC_TOKEN, max_body_bytes=SMALL_CAP)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(8):
            yield b"x" * 1024

    async with serving(app) as url, httpx.AsyncClient() as http:
        answer = await http.post(f"{url}/decode", content=chunks(), headers=_headers(f"Bearer {STATIC_TOKEN}"))
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "too_large"


def _encrypted(data: bytes, key_id: bytes = b"k1") -> Payload:
    return Payload(metadata={"encoding": ENCODING, KEY_ID: key_id}, data=data)


async def test_malformed_input_is_422_never_500(oidc_client: httpx.AsyncClient, codec: EncryptionCodec) -> None:
    """R39: not JSON, not a Payloads JSON, non-UTF-8 bytes, base64 garbage, data shorter than the nonce, a key id
    that is not UTF-8, an unknown key id, and a tag that does not verify are each 422 with a JSON error."""
    sealed = await _sealed(codec)
    tampered = bytearray(sealed.data)
    tampered[-1] ^= 1
    garbage_base64 = json.dumps(
        {
            "payloads": [
                {
                    "metadata": {"encoding": base64.b64encode(ENCODING).decode(), KEY_ID: "azE="},
                    "data": "!!not base64!!",
                }
            ]
        }
    )
    bodies: dict[str, str | bytes] = {
        "not JSON": b"{this is not json",
        "not Payloads": b'{"payloads": 3}',
        "unknown field": b'{"something": []}',
        "not UTF-8": b"\xff\xfe\x00",
        "deeply nested": b"[" * 100_000,
        "base64 garbage": garbage_base64,
        "shorter than the nonce": _body(_encrypted(b"short")),
        "key id not UTF-8": _body(_encrypted(sealed.data, key_id=b"\xff\xfe")),
        "unknown key id": _body(_encrypted(sealed.data, key_id=b"k-unknown")),
        "tag does not verify": _body(_encrypted(bytes(tampered))),
    }
    cap_free = create_app(codec, allowed_origins=[ORIGIN], token=STATIC_TOKEN)  # "deeply nested" is 100 KB
    async with _app_client(cap_free) as client:
        for case, body in bodies.items():
            answer = await client.post("/decode", content=body, headers=_headers(f"Bearer {STATIC_TOKEN}"))
            assert answer.status_code == 422, (case, answer.text)
            assert answer.json()["error"]["code"] in {"invalid_request", "cannot_decode"}, case


async def test_probes_answer_without_credentials(idp: IdentityProvider, codec: EncryptionCodec) -> None:
    """R39: /livez, /readyz and /healthz need no token; /readyz says whether the JWKS was fetched yet."""
    authorizer = Authorizer(idp.settings())
    app = create_app(codec, allowed_origins=[ORIGIN], authorizer=authorizer)
    async with _app_client(app) as client:
        assert (await client.get("/livez")).json() == {"ok": True}
        ready = await client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["jwks_fetched"] is False
        body = _body(await _sealed(codec))
        assert (await client.post("/decode", content=body, headers=_headers(f"Bearer {idp.token()}"))).is_success
        assert (await client.get("/readyz")).json()["jwks_fetched"] is True
        assert (await client.get("/healthz")).status_code == 200


class _SlowCodec(EncryptionCodec):
    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        time.sleep(0.3)  # noqa: ASYNC251 - stands in for CPU-bound work: it blocks whichever thread runs it
        return list(payloads)


async def test_decoding_runs_off_the_event_loop(codec: EncryptionCodec) -> None:
    """R39: a slow decode does not hold up the probes: the codec work runs in a thread."""
    slow = _SlowCodec({"k1": os.urandom(32)}, "k1")
    app = create_app(slow, allowed_origins=[ORIGIN], token=STATIC_TOKEN)
    async with _app_client(app) as client:
        decoding = asyncio.create_task(
            client.post("/decode", content=_body(await _sealed(codec)), headers=_headers(f"Bearer {STATIC_TOKEN}"))
        )
        await asyncio.sleep(0.05)
        started = time.monotonic()
        assert (await client.get("/livez")).status_code == 200
        assert time.monotonic() - started < 0.2
        assert not decoding.done()
        assert (await decoding).status_code == 200


def test_the_app_takes_one_way_of_configuring_auth(codec: EncryptionCodec) -> None:
    """R39: a static token and an authorizer at once would be ambiguous; it is refused."""
    with pytest.raises(ValueError, match="not both"):
        create_app(codec, allowed_origins=[], token="a", authorizer=Authorizer(AuthSettings()))


def _serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {name: value for name, value in os.environ.items() if not name.startswith("HELPER_CODEC_")}
    return subprocess.run(
        [sys.executable, "-m", "codec", "serve", *args],
        env={**clean, "HELPER_CODEC_KEYS": f"k1:{new_key()}", **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_serve_refuses_to_start_without_auth_off_loopback() -> None:
    """R39: `python -m codec serve --host 0.0.0.0` without a token or OIDC exits non-zero with one line."""
    finished = _serve({}, "--host", "0.0.0.0", "--port", "1")
    assert finished.returncode != 0
    assert "HELPER_CODEC_TOKEN" in finished.stderr and len(finished.stderr.strip().splitlines()) == 1


def test_serve_refuses_a_half_configured_oidc() -> None:
    """R39: an issuer without an audience refuses to start and names the missing variable."""
    finished = _serve({"HELPER_CODEC_OIDC_ISSUER": "https://idp.example.test"}, "--port", "1")
    assert finished.returncode != 0 and "HELPER_CODEC_OIDC_AUDIENCE" in finished.stderr


@pytest.mark.parametrize(
    ("variable", "raw"),
    [("HELPER_CODEC_MAX_BODY_BYTES", "0"), ("HELPER_CODEC_MAX_BODY_BYTES", "lots"), ("HELPER_CODEC_PORT", "70000")],
)
def test_serve_refuses_a_bad_number_naming_the_variable_and_its_value(variable: str, raw: str) -> None:
    """A bad value of the codec server's settings stops it with one line naming the variable and the value."""
    finished = _serve({variable: raw})
    assert finished.returncode != 0
    assert f"{variable}={raw!r}" in finished.stderr and len(finished.stderr.strip().splitlines()) == 1
