"""The worker's clients reach the core and the chat through the proxy the settings name (HELPER_CORE_PROXY,
HELPER_CHAT_PROXY), and through no other: the environment's HTTP_PROXY and the like are not read."""

from __future__ import annotations

import httpx
import pytest

from clients.chat_client import ChatClient
from clients.core_client import CoreClient
from config.settings import Settings, SettingsError
from tests.fakes.answering_server import serving_answers

SNAPSHOT = {"session_id": "s-1", "status": "running", "steps": [], "input_tokens_total": 0}


async def test_a_configured_proxy_carries_the_calls_to_the_core_and_the_chat() -> None:
    asked: list[httpx.Request] = []

    def proxy(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        if request.url.path.endswith("/idle"):
            return httpx.Response(200, json={"idle": True})
        return httpx.Response(200, json=SNAPSHOT)

    async with serving_answers(proxy) as proxy_url:
        core = CoreClient("http://core.helpers.invalid:8310", 2_000, proxy=proxy_url)
        chat = ChatClient("http://chat.iva.invalid", 2_000, proxy=proxy_url)
        try:
            assert (await core.snapshot("s-1")).session_id == "s-1"
            assert await chat.is_idle("anna") is True
        finally:
            await core.aclose()
            await chat.aclose()
    assert [str(request.url) for request in asked] == [
        "http://core.helpers.invalid:8310/v1/sessions/s-1",
        "http://chat.iva.invalid/v1/owners/anna/idle",
    ]


async def test_the_environments_proxy_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    async with serving_answers(lambda request: httpx.Response(200, json=SNAPSHOT)) as url:
        core = CoreClient(url, 2_000)
        try:
            assert (await core.snapshot("s-1")).session_id == "s-1"
        finally:
            await core.aclose()


def test_the_proxy_settings_are_read_and_a_malformed_one_names_its_variable() -> None:
    settings = Settings.from_env({"HELPER_CORE_PROXY": "http://proxy.example:3128", "HELPER_CHAT_PROXY": ""})
    assert (settings.core_proxy, settings.chat_proxy) == ("http://proxy.example:3128", None)
    assert Settings.from_env({}).core_proxy is None
    for name in ("HELPER_CORE_PROXY", "HELPER_CHAT_PROXY"):
        for malformed in ("proxy.example:3128", "socks5://proxy.example:1080", "http://", "http://proxy:99999"):
            with pytest.raises(SettingsError, match=f"^{name}="):
                Settings.from_env({name: malformed})
