"""R43 (and R37): `start` and `goal add` ask the core's model catalog on the standard library's HTTP client
(`starter.catalog`), so a write does not load httpx; it must answer exactly what the core client (`CoreClient.models`,
its errors meaning "no usable catalog") answers, for every kind of answer a core may give."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from clients import core_client
from clients.core_client import CoreClient, CoreError
from starter import catalog
from tests.helpers import free_port

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


async def _through_core_client(url: str) -> list[str] | None:
    """What `check_model` did before: `CoreClient.models`, any CoreError meaning no usable catalog."""
    core = CoreClient(url, 1_000)
    try:
        return await core.models(timeout_s=TIMEOUT_S)
    except CoreError:
        return None
    finally:
        await core.aclose()


CATALOG = json.dumps({"models": ["scripted", "openai:gpt-5"]}).encode()
SCENARIOS: dict[str, dict[str, Any]] = {
    "a catalog": {"body": CATALOG},
    "an empty catalog": {"body": b'{"models": []}'},
    "no catalog (404)": {"status": 404, "body": b'{"message": "not found"}'},
    "a failing core (503)": {"status": 503, "body": b"down"},
    "a refusal (403)": {"status": 403, "body": b'{"message": "no"}'},
    "a redirect": {"status": 302, "body": b"", "headers": {"Location": "/elsewhere"}},
    "not JSON": {"body": b"<html>hello</html>"},
    "the wrong shape": {"body": b'{"models": "scripted"}'},
    "a name too long": {"body": json.dumps({"models": ["m" * 101]}).encode()},
    "a declared body over the cap": {"body": CATALOG, "declared": core_client.CORE_ANSWER_MAX_BYTES + 1},
    "too slow": {"body": CATALOG, "delay_s": TIMEOUT_S + 0.4},
    "under a path prefix": {"body": CATALOG, "path": "/core/v1/models", "prefix": "/core"},
}


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_the_stdlib_catalog_answers_as_the_core_client(name: str, core_port: int) -> None:
    """R43, R37: the same list, or None, as `CoreClient.models` for each answer."""
    scenario = SCENARIOS[name]
    _Core.scenario = scenario
    url = f"http://127.0.0.1:{core_port}{scenario.get('prefix', '')}"
    started = time.monotonic()
    fetched = await catalog.offered_models(url, 1_000, TIMEOUT_S)
    assert time.monotonic() - started < TIMEOUT_S + 0.3  # bounded as the core client's call is
    assert fetched == await _through_core_client(url)
    if name in ("a catalog", "under a path prefix"):
        assert fetched == ["scripted", "openai:gpt-5"]


async def test_no_core_listening_means_no_catalog() -> None:
    """R43: a core that is down leaves the check to the create, on both clients."""
    url = f"http://127.0.0.1:{free_port()}"
    assert await catalog.offered_models(url, 1_000, TIMEOUT_S) is None
    assert await _through_core_client(url) is None


def test_https_and_proxies_stay_with_the_core_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """R43: where httpx's own TLS trust or proxy handling would decide (HELPER_CORE_PROXY), the starter asks through
    `CoreClient`; the environment's proxy variables decide nothing, as they decide nothing for the core client."""
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example.com:3128")
    assert catalog._plain_http("http://127.0.0.1:8310", None)
    assert not catalog._plain_http("https://core.example.com", None)
    assert not catalog._plain_http("http://127.0.0.1:8310", "http://proxy.example.com:3128")


def test_the_cap_is_the_core_clients() -> None:
    """R43, R37: the catalog's body is capped where the core client caps every answer."""
    assert catalog.CORE_ANSWER_MAX_BYTES == core_client.CORE_ANSWER_MAX_BYTES


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
