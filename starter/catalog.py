"""The core's model catalog (`GET /v1/models`) as `start` and `goal add` ask it: through the core client
(`clients.core_client.CoreClient.models`, on the project's one HTTP client), loaded only when a command asks, so no
other command pays for httpx's import. The starter only tells a catalog from "no usable catalog": any `CoreError`
(404, another status, a redirect, a malformed or oversized body, no answer within the time) is None, and the create
decides.
"""

from __future__ import annotations

import asyncio
import time


async def offered_models(core_url: str, check_ms: int, timeout_s: float, proxy: str | None = None) -> list[str] | None:
    """The models the core at `core_url` offers, or None when it offers no usable catalog within `timeout_s`."""
    from clients.core_client import CoreClient, CoreError

    core = CoreClient(core_url, check_ms, proxy=proxy)
    try:
        return await core.models(timeout_s=timeout_s)
    except CoreError:
        return None
    finally:
        await core.aclose()


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
