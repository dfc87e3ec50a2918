"""The conformance suite: checks any core against the session contract (contracts/core_api.py, R14).

    pytest tests/conformance --core-url http://127.0.0.1:8310 [--core-model scripted]

Without --core-url (or CORE_CONFORMANCE_URL) the suite starts the reference core itself on a temporary
database, so a plain `pytest` (and CI) checks the reference core. The core under test must offer a model
that follows the `helper-script` block of the task (the reference core's `scripted`), under the name
given by --core-model (or CORE_CONFORMANCE_MODEL; default `scripted`): ceilings, finish-now and cancel
need a turn whose length and usage the test decides. See docs/reference-core.md.

The option is registered here: pytest reads it when the suite's folder (or a file in it) is named on
the command line, and a plain `pytest` from the repository root runs the suite against the reference
core without it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from reference.core.script import scripted_task
from reference.core.server import running_core
from tests.conformance.contract import CoreUnderTest, session_body

ENV_URL = "CORE_CONFORMANCE_URL"
ENV_MODEL = "CORE_CONFORMANCE_MODEL"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "core conformance suite (tests/conformance)")
    group.addoption(
        "--core-url",
        default=None,
        help=f"base URL of the core to check (env {ENV_URL}); default: start the reference core",
    )
    group.addoption(
        "--core-model",
        default=None,
        help=f"the core's model that follows helper-script blocks (env {ENV_MODEL}); default: scripted",
    )


def _option(config: pytest.Config, name: str, env: str) -> str | None:
    # getoption with a default: in a plain `pytest` run this conftest is read after the command line.
    value = config.getoption(name, None) or os.environ.get(env) or None
    return str(value) if value else None


@pytest_asyncio.fixture(scope="session")
async def core_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """The core under test: --core-url, or a reference core started for this run."""
    given = _option(request.config, "core_url", ENV_URL)
    if given is not None:
        yield given.rstrip("/")
        return
    async with running_core(tmp_path_factory.mktemp("conformance") / "core.sqlite3") as base_url:
        yield base_url


@pytest.fixture(scope="session")
def core_is_reference(request: pytest.FixtureRequest) -> bool:
    """True when the suite checks the reference core it started itself (which must offer every option)."""
    return _option(request.config, "core_url", ENV_URL) is None


@pytest.fixture(scope="session")
def core_model(request: pytest.FixtureRequest) -> str:
    return _option(request.config, "core_model", ENV_MODEL) or "scripted"


def pytest_report_header(config: pytest.Config) -> str:
    url = _option(config, "core_url", ENV_URL)
    model = _option(config, "core_model", ENV_MODEL) or "scripted"
    where = f"the core at {url}" if url else "a reference core started by the suite"
    return f"conformance: {where}, model {model!r}"


@pytest_asyncio.fixture(scope="session")
async def core(core_url: str, core_model: str) -> AsyncIterator[CoreUnderTest]:
    """The core under test, once it is healthy and offers the model that follows helper-script blocks."""
    async with httpx.AsyncClient(base_url=core_url, timeout=10) as http:
        try:
            health = await http.get("/healthz")
        except httpx.TransportError as error:
            pytest.fail(f"no core at {core_url}: {error!r}")
        if health.status_code != 200:
            pytest.fail(f"the core at {core_url} is not healthy: {health.status_code} {health.text}")
        probe = session_body(scripted_task("Conformance probe", steps=1, step_ms=0), model=core_model)
        answer = await http.post("/v1/sessions", json=probe)
        if answer.status_code != 201:
            pytest.fail(
                f"the core at {core_url} cannot run the model {core_model!r} ({answer.status_code} {answer.text}); "
                "name its scripted model with --core-model"
            )
        yield CoreUnderTest(http, core_model)
