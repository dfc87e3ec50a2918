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


# A process asks the core for its catalog at most once in this long (a burst of starts asks once); a model the
# cached catalog lacks is looked up again if the catalog is older than CATALOG_RECHECK_S, so a model the core has
# just added is not refused for long. "No usable catalog" is kept for a shorter time.
CATALOG_FRESH_S = 60.0
CATALOG_RECHECK_S = 5.0
NO_CATALOG_FRESH_S = 5.0

_Key = tuple[str, str | None]
_known: dict[_Key, tuple[float, list[str] | None]] = {}
_asking: dict[_Key, asyncio.Task[list[str] | None]] = {}


async def models_offering(
    core_url: str, model: str, check_ms: int, timeout_s: float, proxy: str | None = None
) -> list[str] | None:
    """The core's catalog as this process last saw it, asked again when stale or when it lacks `model`; callers
    that ask at the same moment share one request. None: the core offers no usable catalog."""
    key = (core_url, proxy)
    now = time.monotonic()
    seen = _known.get(key)
    if seen is not None:
        age, models = now - seen[0], seen[1]
        fresh = CATALOG_FRESH_S if models is not None else NO_CATALOG_FRESH_S
        if age < fresh and (models is None or model in models or age < CATALOG_RECHECK_S):
            return models
    loop = asyncio.get_running_loop()
    asking = _asking.get(key)
    if asking is None or asking.done() or asking.get_loop() is not loop:
        asking = loop.create_task(offered_models(core_url, check_ms, timeout_s, proxy))
        _asking[key] = asking
    models = await asyncio.shield(asking)
    _known[key] = (time.monotonic(), models)
    return models
