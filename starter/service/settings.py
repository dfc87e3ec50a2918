"""The service's own settings (`HELPER_API_*`), beside the starter's (`config.settings.Settings`): where it listens,
who may call it, and the bounds on every request. A bad value is an error that names its variable."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from config.settings import is_loopback

DEFAULT_BIND = "127.0.0.1:8340"
TOKEN_MIN_CHARS = 16


class ServiceSettingsError(ValueError):
    pass


class ServiceSettings(BaseModel):
    bind: str = DEFAULT_BIND  # host:port
    token: str | None = Field(default=None, repr=False)  # Authorization: Bearer <token> on every /v1 request
    tls_cert: Path | None = None  # PEM certificate chain; with tls_key, the service speaks HTTPS only
    tls_key: Path | None = None
    max_body_bytes: int = Field(default=256 * 1024, gt=0)  # a start's task is at most 20,000 characters
    read_timeout_ms: int = Field(default=5_000, gt=0)  # a request not in whole (headers and body) by then: closed
    request_timeout_ms: int = Field(default=10_000, gt=0)  # a read's bound; a write's is HELPER_STARTER_TIMEOUT_MS
    watch_max_ms: int = Field(default=3_600_000, gt=0)  # a live-lines stream ends after this; the caller reconnects
    max_watches: int = Field(default=500, gt=0)  # streams open at once; one more is answered 503
    shutdown_grace_ms: int = Field(default=20_000, ge=0)  # requests in flight may finish this long after SIGTERM
    store_pool_size: int = Field(default=10, gt=0)  # PostgreSQL connections for the reads

    @property
    def host(self) -> str:
        host = self.bind.rsplit(":", 1)[0]
        return host[1:-1] if host.startswith("[") else host

    @property
    def port(self) -> int:
        return int(self.bind.rsplit(":", 1)[1])

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str], bind: str | None = None) -> ServiceSettings:
        names = {
            "bind": "HELPER_API_BIND",
            "token": "HELPER_API_TOKEN",
            "tls_cert": "HELPER_API_TLS_CERT",
            "tls_key": "HELPER_API_TLS_KEY",
            "max_body_bytes": "HELPER_API_MAX_BODY_BYTES",
            "read_timeout_ms": "HELPER_API_READ_TIMEOUT_MS",
            "request_timeout_ms": "HELPER_API_REQUEST_TIMEOUT_MS",
            "watch_max_ms": "HELPER_API_WATCH_MAX_MS",
            "max_watches": "HELPER_API_MAX_WATCHES",
            "shutdown_grace_ms": "HELPER_API_SHUTDOWN_GRACE_MS",
            "store_pool_size": "HELPER_API_STORE_POOL_SIZE",
        }
        values: dict[str, object] = {field: env[name] for field, name in names.items() if env.get(name, "").strip()}
        if bind is not None:
            values["bind"] = bind
        try:
            settings = cls.model_validate(values)
        except ValidationError as error:
            problem = error.errors()[0]
            name = names[str(problem["loc"][0])]
            shown = "***" if name == "HELPER_API_TOKEN" else repr(env.get(name, ""))
            raise ServiceSettingsError(f"{name}={shown}: {problem['msg']}") from None
        if refusal := settings.problem():
            raise ServiceSettingsError(refusal)
        return settings

    def problem(self) -> str | None:
        """Why the service must not start with these settings, or None: it is safe by default (R47)."""
        host, _, port = self.bind.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            return f"HELPER_API_BIND={self.bind!r}: expected host:port, such as 127.0.0.1:8340"
        if self.token is not None and len(self.token) < TOKEN_MIN_CHARS:
            return f"HELPER_API_TOKEN is too short: at least {TOKEN_MIN_CHARS} characters"
        if self.token is None and not is_loopback(self.host):
            return (
                f"HELPER_API_TOKEN is not set and the service would listen on {self.bind}, beyond this machine: "
                "set HELPER_API_TOKEN (callers send it as 'Authorization: Bearer <token>'), or bind to 127.0.0.1"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            return "HELPER_API_TLS_CERT and HELPER_API_TLS_KEY go together: set both for HTTPS, or neither"
        for name, path in (("HELPER_API_TLS_CERT", self.tls_cert), ("HELPER_API_TLS_KEY", self.tls_key)):
            if path is not None and not path.is_file():
                return f"{name}={str(path)!r}: no such file"
        return None
