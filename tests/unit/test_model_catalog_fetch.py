"""R37, R48: `start` and `goal add` ask the core's model catalog (`starter.catalog`, through the core client): a
catalog is its list of models, and any other answer a core may give is "no usable catalog" (None), within the
time; a process asks once for a burst of starts."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from clients import core_client
from starter import catalog
from tests.helpers import BOUNDED_S, HANG_S, free_port

TIMEOUT_S = 0.6


class _Core(http.server.BaseHTTPRequestHandler):
    """A core whose `GET <prefix>/v1/models` answers with the scenario the test set."""

    scenario: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:
        answer = self.scenario
        if self.path != answer.get("path", "/v1/models"):
            self.send_response(404)
            self.end_headers()
            return
        time.sleep(answer.get("delay_s", 0))
        body: bytes = answer.get("body", b"")
        self.send_response(answer.get("status", 200))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(answer.get("declared", len(body))))
        for name, value in answer.get("headers", {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def core_port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Core)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()


CATALOG = json.dumps({"models": ["scripted", "openai:gpt-5"]}).encode()
MODELS = ["scripted", "openai:gpt-5"]
# Each answer a core may give, and what the check makes of it: the models, or None (no usable catalog).
SCENARIOS: dict[str, tuple[dict[str, Any], list[str] | None]] = {
    "a catalog": ({"body": CATALOG}, MODELS),
    "an empty catalog": ({"body": b'{"models": []}'}, []),
    "no catalog (404)": ({"status": 404, "body": b'{"message": "not found"}'}, None),
    "a failing core (503)": ({"status": 503, "body": b"down"}, None),
    "a refusal (403)": ({"status": 403, "body": b'{"message": "no"}'}, None),
    "a redirect": ({"status": 302, "body": b"", "headers": {"Location": "/elsewhere"}}, None),
    "not JSON": ({"body": b"<html>hello</html>"}, None),
    "the wrong shape": ({"body": b'{"models": "scripted"}'}, None),
    "a name too long": ({"body": json.dumps({"models": ["m" * 101]}).encode()}, None),
    "a declared body over the cap": ({"body": CATALOG, "declared": core_client.CORE_ANSWER_MAX_BYTES + 1}, None),
    "too slow": ({"body": CATALOG, "delay_s": HANG_S}, None),
    "under a path prefix": ({"body": CATALOG, "path": "/core/v1/models", "prefix": "/core"}, MODELS),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_the_catalog_is_a_list_of_models_or_none(name: str, core_port: int) -> None:
    """R37: a valid catalog is its models; anything else is no usable catalog, answered within the time."""
    scenario, expected = SCENARIOS[name]
    _Core.scenario = scenario
    url = f"http://127.0.0.1:{core_port}{scenario.get('prefix', '')}"
    started = time.monotonic()
    fetched = await catalog.offered_models(url, 1_000, TIMEOUT_S)
    assert time.monotonic() - started < BOUNDED_S
    assert fetched == expected


async def test_no_core_listening_means_no_catalog() -> None:
    """R37: a core that is down leaves the check to the create."""
    assert await catalog.offered_models(f"http://127.0.0.1:{free_port()}", 1_000, TIMEOUT_S) is None


async def test_the_environments_proxy_decides_nothing(core_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """R37: the catalog is asked directly, as the core client asks everything: a proxy comes from the settings
    (HELPER_CORE_PROXY), never from the environment's proxy variables."""
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{free_port()}")
    _Core.scenario = {"body": CATALOG}
    assert await catalog.offered_models(f"http://127.0.0.1:{core_port}", 1_000, TIMEOUT_S) == MODELS


class _CountedCore(http.server.BaseHTTPRequestHandler):
    """A core that counts its catalog requests and answers each after a moment, with the models the test sets."""

    requests: ClassVar[int] = 0
    models: ClassVar[list[str]] = ["scripted"]

    def do_GET(self) -> None:
        type(self).requests += 1
        time.sleep(0.2)  # long enough for every caller of a burst to ask while the first request is out
        body = json.dumps({"models": self.models}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def counted_core() -> Iterator[str]:
    _CountedCore.requests, _CountedCore.models = 0, ["scripted"]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountedCore)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


async def test_a_burst_of_starts_asks_the_core_once(counted_core: str) -> None:
    """R48: the process caches the catalog: 200 starts at the same moment, and more a moment later, cost the core one
    request."""
    import asyncio

    answers = await asyncio.gather(
        *(catalog.models_offering(counted_core, "scripted", 1_000, TIMEOUT_S) for _ in range(200))
    )
    assert answers == [["scripted"]] * 200
    assert await catalog.models_offering(counted_core, "scripted", 1_000, TIMEOUT_S) == ["scripted"]
    assert _CountedCore.requests == 1


async def test_a_model_the_cached_catalog_lacks_is_looked_up_again(
    counted_core: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R48: a model the core has added since the catalog was cached is not refused for long: once the cache is older
    than CATALOG_RECHECK_S, a model it lacks sends one more request; a model it has sends none."""
    assert await catalog.models_offering(counted_core, "scripted", 1_000, TIMEOUT_S) == ["scripted"]
    _CountedCore.models = ["scripted", "openai:gpt-5"]
    assert await catalog.models_offering(counted_core, "openai:gpt-5", 1_000, TIMEOUT_S) == ["scripted"]
    assert _CountedCore.requests == 1, "within CATALOG_RECHECK_S the cached catalog answers"
    monkeypatch.setattr(catalog, "CATALOG_RECHECK_S", 0.0)
    assert await catalog.models_offering(counted_core, "scripted", 1_000, TIMEOUT_S) == ["scripted"]
    assert _CountedCore.requests == 1, "a model the catalog has asks nothing"
    offered = await catalog.models_offering(counted_core, "openai:gpt-5", 1_000, TIMEOUT_S)
    assert offered == ["scripted", "openai:gpt-5"] and _CountedCore.requests == 2
