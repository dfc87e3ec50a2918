"""What the worker's HTTP clients (core, chat) share: how long idle connections are kept, and the proxy."""

from __future__ import annotations

import urllib.request

from yarl import URL

# How long an idle connection is kept for the next call. Below the 5 s that common servers (uvicorn, nginx's
# upstreams) keep theirs, so a client seldom reuses one the server is closing at that moment.
KEEPALIVE_S = 4.0


def env_proxy(base_url: str) -> str | None:
    """The proxy that HTTP_PROXY / HTTPS_PROXY / NO_PROXY name for `base_url`, looked up once per client.

    aiohttp's `trust_env` looks it (and ~/.netrc) up again for every call, in a thread: two thread hops per call,
    more CPU than the call itself."""
    url = URL(base_url)
    if url.host is None or urllib.request.proxy_bypass(url.host):
        return None
    return urllib.request.getproxies_environment().get(url.scheme)
