"""Configuration from the environment: where Temporal, the store, the core and the chat are, and the limits.

Every `HELPER_*` constant of the seed can be overridden by an environment variable of the same name.
A bad value is an error that names the variable; nothing starts with a half-read configuration.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, ValidationError, field_validator

from domain.limits import FollowTuning, Limits, Policy


class SettingsError(ValueError):
    pass


class Settings(BaseModel):
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    task_queue: str = "helpers"
    store_url: str = "sqlite+aiosqlite:///data/helpers.sqlite3"
    results_dir: Path = Path("data/results")
    core_url: str = "http://127.0.0.1:8310"
    chat_url: str = "http://127.0.0.1:8320"
    # The worker's clients read no proxy from the environment (HTTP_PROXY and the like): only these, when set.
    core_proxy: str | None = None
    chat_proxy: str | None = None
    migrate_on_start: bool | None = None  # None: yes for SQLite (the local default), no otherwise
    # Slots of the short activities (admission, open, finish, cancel, reset, chat offers, Goal checks, the sweep):
    # each is bounded by HELPER_CHECK_MS or 30 s. 100 of them still pass ~7 calls a second through a core that
    # takes the whole 15 s bound, many times the rate at which thousands of running helpers end.
    max_concurrent_activities: int = Field(default=100, gt=0)
    # Slots of the follows, on their own task queue (protocol.names.follows_task_queue): every running helper
    # holds one for its whole run, an idle long poll to the core. A replica's advertised capacity is 2,000 running
    # helpers; 2,500 slots keep a fifth of them free there (python -m tools.bench.capacity; docs/operations.md,
    # "Scaling").
    max_concurrent_follows: int = Field(default=2_500, gt=0)
    # Every starter write is answered within this (R48): done, accepted by Temporal but not yet answered, or not
    # taken (protocol.deadlines). It covers connecting to Temporal too.
    starter_timeout_ms: int = Field(default=10_000, ge=1_000)
    # Writes one starter process (the HTTP service, a HelperClient) has in flight; more wait their turn while their
    # bound allows, else are refused `busy` before anything is sent (starter.backpressure).
    starter_max_in_flight: int = Field(default=32, gt=0)
    # Whether writes carry an accept-by time for the coordinator to check: off only for a Temporal server whose
    # clock does not follow the wall clock (the time-skipping test server).
    starter_accept_by: bool = True
    metrics_bind: str | None = None  # host:port for the worker's Prometheus metrics; off when unset
    health_bind: str | None = None  # host:port for the worker's /livez and /readyz; off when unset
    codec_keys: str | None = Field(default=None, repr=False)  # id:base64key,... encrypts payloads when set
    codec_key_id: str | None = None  # the key new payloads use; default the first
    # With keys, unencrypted payloads are refused (R39); allow them only while histories written in clear run out.
    codec_allow_plaintext: bool = False
    # Whether running without keys is refused; None: required unless Temporal is on this machine (the local run).
    codec_required: bool | None = None
    # Tracing (observability/tracing.py): None follows the OTLP endpoint; True or False forces it on or off.
    tracing: bool | None = None
    # Read only to decide whether tracing is on; the OTLP exporter reads its own OTEL_* variables.
    otlp_endpoint: str | None = None
    # Worker Versioning (docs/operations.md, "Releases"): every worker polls as one build of one Worker Deployment.
    deployment_name: str = Field(default="helper-runtime", min_length=1)
    # One build per release; workflows started on it stay on it (PINNED) until they end.
    build_id: str = Field(default_factory=lambda: release_build_id(), min_length=1)
    # Make this build the deployment's current version once the worker polls: right for one worker (the local run,
    # the tests); a cluster promotes a new build by hand while the old one drains (docs/operations.md).
    promote_build: bool = True
    policy: Policy = Policy()

    @field_validator("core_proxy", "chat_proxy")
    @classmethod
    def _proxy_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected a proxy URL such as http://proxy.example:3128")
        try:
            parts.port  # noqa: B018 (a port out of range raises here)
        except ValueError:
            raise ValueError("the proxy's port is not a port number") from None
        return value.strip()

    @property
    def tracing_enabled(self) -> bool:
        if self.tracing is not None:
            return self.tracing
        return bool(self.otlp_endpoint)

    @property
    def encryption_required(self) -> bool:
        if self.codec_required is not None:
            return self.codec_required
        return not is_loopback(self.temporal_address)

    def encryption_problem(self) -> str | None:
        """Why this process must not talk to Temporal with these settings, or None (R39)."""
        if self.codec_keys or not self.encryption_required:
            return None
        return (
            f"HELPER_CODEC_KEYS is not set and Temporal ({self.temporal_address}) is not on this machine: "
            "set HELPER_CODEC_KEYS to the workers' keys, or HELPER_CODEC_REQUIRED=false to send tasks in clear"
        )

    @property
    def migrates_on_start(self) -> bool:
        if self.migrate_on_start is not None:
            return self.migrate_on_start
        return self.store_url.startswith("sqlite")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        plain = {
            "temporal_address": "TEMPORAL_ADDRESS",
            "temporal_namespace": "TEMPORAL_NAMESPACE",
            "task_queue": "HELPER_TASK_QUEUE",
            "store_url": "HELPER_STORE_URL",
            "results_dir": "HELPER_RESULTS_DIR",
            "core_url": "HELPER_CORE_URL",
            "chat_url": "HELPER_CHAT_URL",
            "core_proxy": "HELPER_CORE_PROXY",
            "chat_proxy": "HELPER_CHAT_PROXY",
            "metrics_bind": "HELPER_METRICS_BIND",
            "health_bind": "HELPER_HEALTH_BIND",
            "codec_keys": "HELPER_CODEC_KEYS",
            "codec_key_id": "HELPER_CODEC_KEY_ID",
            "deployment_name": "HELPER_DEPLOYMENT_NAME",
            "build_id": "HELPER_BUILD_ID",
        }
        values: dict[str, object] = {field: env[name] for field, name in plain.items() if name in env}
        if "HELPER_TRACING" in env:
            values["tracing"] = _flag(env, "HELPER_TRACING")
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if endpoint:
            values["otlp_endpoint"] = endpoint
        if "HELPER_CODEC_ALLOW_PLAINTEXT" in env:
            values["codec_allow_plaintext"] = _flag(env, "HELPER_CODEC_ALLOW_PLAINTEXT")
        if "HELPER_CODEC_REQUIRED" in env:
            values["codec_required"] = _flag(env, "HELPER_CODEC_REQUIRED")
        if "HELPER_PROMOTE_BUILD" in env:
            values["promote_build"] = _flag(env, "HELPER_PROMOTE_BUILD")
        if "HELPER_STARTER_ACCEPT_BY" in env:
            values["starter_accept_by"] = _flag(env, "HELPER_STARTER_ACCEPT_BY")
        if "HELPER_MIGRATE_ON_START" in env:
            values["migrate_on_start"] = _flag(env, "HELPER_MIGRATE_ON_START")
        counts = {
            "max_concurrent_activities": "HELPER_MAX_CONCURRENT_ACTIVITIES",
            "max_concurrent_follows": "HELPER_MAX_CONCURRENT_FOLLOWS",
            "starter_timeout_ms": "HELPER_STARTER_TIMEOUT_MS",
            "starter_max_in_flight": "HELPER_STARTER_MAX_IN_FLIGHT",
        }
        values.update(_ints(env, counts))
        policy_fields = {
            "max_open": "HELPER_MAX_OPEN",
            "max_running": "HELPER_MAX_RUNNING",
            "max_rows": "HELPER_MAX_ROWS",
            "keep_ms": "HELPER_KEEP_MS",
            "summary_max": "HELPER_SUMMARY_MAX",
            "check_ms": "HELPER_CHECK_MS",
        }
        limit_fields = {
            "deadline_ms": "HELPER_DEADLINE_MS",
            "grace_ms": "HELPER_GRACE_MS",
            "ceiling_tokens": "HELPER_CEILING_TOKENS",
            "max_steps": "TURN_MAX_STEPS_HELPER",
            "max_input_tokens": "HELPER_INPUT_CEILING_TOKENS",
        }
        follow_fields = {
            "poll_ms": "HELPER_POLL_MS",
            "wait_ms": "HELPER_LONG_POLL_MS",
            "liveness_ms": "HELPER_FOLLOW_LIVENESS_MS",
            "window_ms": "HELPER_FOLLOW_WINDOW_MS",
            "resume_ms": "HELPER_FOLLOW_RESUME_MS",
            "silence_ms": "HELPER_CORE_SILENCE_MS",
            "bad_answers": "HELPER_CORE_BAD_ANSWERS",
        }
        policy = Policy(
            **_checked(Policy, env, policy_fields),
            limits=Limits(**_checked(Limits, env, limit_fields)),
            follow=FollowTuning(**_checked(FollowTuning, env, follow_fields)),
        )
        try:
            return cls.model_validate({**values, "policy": policy})
        except ValidationError as error:
            problem = error.errors()[0]
            field = str(problem["loc"][0])
            name = {**plain, **counts}.get(field, field)
            raise SettingsError(f"{name}={env.get(name, '')!r}: {problem['msg']}") from None


def release_build_id() -> str:
    """The installed release's version: the build id a worker polls as unless HELPER_BUILD_ID names another."""
    return version("helper-runtime")


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = env[name].strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    raise SettingsError(f"{name}={env[name]!r}: expected true or false")


def is_loopback(address: str) -> bool:
    """Whether a host:port (or a bare host) is on this machine."""
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
    if host.startswith("[") and "]" in host:
        host = host[1 : host.index("]")]
    host = host.strip().lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _checked(model: type[BaseModel], env: Mapping[str, str], fields: dict[str, str]) -> dict[str, int]:
    """The integer variables of one model, each checked alone so an error names its variable."""
    values = _ints(env, fields)
    for field, value in values.items():
        try:
            model.model_validate({field: value})
        except ValidationError as error:
            raise SettingsError(f"{fields[field]}={env[fields[field]]!r}: {error.errors()[0]['msg']}") from None
    return values


def _ints(env: Mapping[str, str], fields: dict[str, str]) -> dict[str, int]:
    values: dict[str, int] = {}
    for field, name in fields.items():
        if name not in env:
            continue
        raw = env[name].replace("_", "")
        try:
            values[field] = int(raw)
        except ValueError:
            raise SettingsError(f"{name}={env[name]!r} is not a whole number") from None
    return values
