"""Running the service: `helper-starter serve`. uvicorn serves the app on HELPER_API_BIND (HTTPS when
HELPER_API_TLS_CERT and HELPER_API_TLS_KEY are set), closing a connection whose request has not arrived whole
within HELPER_API_READ_TIMEOUT_MS (`starter.service.read_timeout`); SIGTERM or Ctrl-C stops taking connections, ends
the live-lines streams, lets requests in flight finish within HELPER_API_SHUTDOWN_GRACE_MS, then closes the store."""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType

import uvicorn

from config.settings import Settings
from protocol.errors import InvalidConfiguration
from starter.service.app import create_app, with_guards
from starter.service.context import ServiceState
from starter.service.read_timeout import ReadTimeoutConfig

log = logging.getLogger("helper_api")


class _Server(uvicorn.Server):
    """uvicorn's server, which also ends the live-lines streams when asked to stop: a stream never ends by
    itself, and uvicorn waits for every response in flight."""

    def __init__(self, config: uvicorn.Config, state: ServiceState) -> None:
        super().__init__(config)
        self.service_state = state
        self.loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)  # type: ignore[arg-type]

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.service_state.stop)
        super().handle_exit(sig, frame)


def serve(settings: Settings, bind: str | None = None) -> None:
    """Serve until SIGTERM or Ctrl-C, on `bind` if given (`serve --bind`), else on HELPER_API_BIND. Refuses to
    start (InvalidConfiguration) when unsafe or misconfigured."""
    if bind is not None:
        settings = settings.model_copy(update={"service": settings.service.model_copy(update={"bind": bind})})
    service = settings.service
    if problem := service.problem():
        raise InvalidConfiguration(f"the service's configuration is invalid: {problem}")
    if problem := settings.encryption_problem():
        raise InvalidConfiguration(problem)  # every write would be refused: say so at start, not per request
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    config = ReadTimeoutConfig(
        with_guards(app, service),
        read_timeout_s=service.read_timeout_ms / 1000,
        host=service.host,
        port=service.port,
        ssl_certfile=str(service.tls_cert) if service.tls_cert else None,
        ssl_keyfile=str(service.tls_key) if service.tls_key else None,
        timeout_graceful_shutdown=max(1, round(service.shutdown_grace_ms / 1000)),
        lifespan="on",
        log_level="warning",
        access_log=False,
        server_header=False,
    )
    server = _Server(config, app.state.service)
    # uvicorn raises a stopping signal again once it has shut down gracefully; asked to stop, the service has
    # done what it should: SIGTERM then ends it with exit 0 (Ctrl-C's KeyboardInterrupt is exit 0 in starter.cli).
    signal.signal(signal.SIGTERM, lambda *_: None)
    scheme = "https" if service.tls else "http"
    log.info("helper-starter serve on %s://%s (token %s)", scheme, service.bind, "required" if service.token else "off")
    server.run()
