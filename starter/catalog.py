"""The core's model catalog (`GET /v1/models`) as `start` and `goal add` ask it, on the standard library's HTTP
client: httpx (the core client's transport) costs a write command about as much to import as the request takes,
and a write is one process per chat turn (R43).

It answers exactly as `clients.core_client.CoreClient.models` would for the starter's purpose, which only tells a
catalog from "no usable catalog": a 2xx answer whose body (at most `CORE_ANSWER_MAX_BYTES`) is a valid
`ModelCatalog` is the list of models; anything else (404, another status, a redirect, a malformed or oversized
body, no answer within the time) is None, and the create decides. `tests/unit/test_model_catalog_fetch.py`
holds the two side by side. A core behind an HTTPS URL or a proxy (HELPER_CORE_PROXY) is asked through
`CoreClient`, whose TLS trust store and proxy handling are httpx's.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

from pydantic import ValidationError

from contracts.core_api import ModelCatalog

# clients.core_client.CORE_ANSWER_MAX_BYTES, spelled here so that asking the catalog does not load httpx (a test
# checks they agree).
CORE_ANSWER_MAX_BYTES = 16 * 1024 * 1024


def _plain_http(core_url: str, proxy: str | None) -> bool:
    """Whether the stdlib client asks as httpx would: plain HTTP, and no proxy configured for httpx to use."""
    return urlsplit(core_url).scheme == "http" and proxy is None


def _fetch(core_url: str, timeout_s: float) -> list[str] | None:
    import http.client

    deadline = time.monotonic() + timeout_s

    def remaining() -> float:  # every socket operation gets what is left, so the whole call is bounded
        return max(0.001, deadline - time.monotonic())

    parts = urlsplit(core_url.rstrip("/"))
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
    try:
        connection.connect()
        sock = connection.sock  # kept: the connection lets go of it once an answer says it closes
        sock.settimeout(remaining())
        connection.request("GET", f"{parts.path}/v1/models", headers={"Accept": "*/*"})
        response = connection.getresponse()
        if not 200 <= response.status < 300:
            return None
        declared = response.getheader("content-length", "")
        if declared.isdigit() and int(declared) > CORE_ANSWER_MAX_BYTES:
            return None
        body = bytearray()
        while True:
            sock.settimeout(remaining())
            chunk = response.read1(64 * 1024)
            if not chunk:
                break
            body += chunk
            if len(body) > CORE_ANSWER_MAX_BYTES or time.monotonic() > deadline:
                return None
        return ModelCatalog.model_validate_json(bytes(body)).models
    except (OSError, http.client.HTTPException, ValidationError, ValueError):
        return None
    finally:
        connection.close()


async def offered_models(core_url: str, check_ms: int, timeout_s: float, proxy: str | None = None) -> list[str] | None:
    """The models the core at `core_url` offers, or None when it offers no usable catalog within `timeout_s`."""
    if not _plain_http(core_url, proxy):
        from clients.core_client import CoreClient, CoreError

        core = CoreClient(core_url, check_ms, proxy=proxy)
        try:
            return await core.models(timeout_s=timeout_s)
        except CoreError:
            return None
        finally:
            await core.aclose()
    try:
        return await asyncio.wait_for(asyncio.to_thread(_fetch, core_url, timeout_s), timeout_s)
    except TimeoutError:
        return None  # the thread ends at its own deadline; the answer is no longer waited for
