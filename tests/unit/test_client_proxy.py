"""The worker's clients reach the core and the chat through the proxy the environment names, as before."""

from __future__ import annotations

import pytest

from clients.http import env_proxy


def test_the_environment_names_the_proxy_and_no_proxy_bypasses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("http://core.helpers.svc:8080") is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,.cluster.local")
    assert env_proxy("http://core.helpers.svc:8080") == "http://proxy.example:3128"
    assert env_proxy("https://core.helpers.svc") is None  # no HTTPS_PROXY
    assert env_proxy("http://127.0.0.1:9000") is None
    assert env_proxy("http://chat.iva.svc.cluster.local") is None
