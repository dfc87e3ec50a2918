"""Configuration from the environment: one typed tree of every setting the runtime's processes read.

Each field names the variable it is read from (its alias), once; the tree's parts are the runtime's own settings,
the owner policy's limits (`domain.limits` keeps their defaults and ranges), the starter API's (`HELPER_API_*`),
the codec server's (`HELPER_CODEC_*`) and the worker's logging. `Settings.from_env` reads them all: a bad value is
an error that names the variable and its value (a secret shown as ***); nothing starts with a half-read
configuration. docs/configuration.md lists every variable with its default (tests/unit/test_configuration_doc.py).

The tree is plain pydantic: each variable is a field alias, and pydantic parses and checks it. pydantic-settings
would add nothing these aliases do not, and importing it loads asyncio, which a starter's read on SQLite never does
(R43, tests/unit/test_starter_imports.py). Nothing else in the product reads the environment but `config.local_env`
(which file completes it for the CLI) and the libraries' own variables (Temporal's client profile and TLS, the
OTLP exporter's headers and timeout).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Collection, Iterator, Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, ClassVar
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from config.local_env import DEFAULT_FILE, ENV_FILE_VARIABLE, LocalEnvError, with_local_env
from config.store_address import StoreAddress
from domain.audit import AUDIT_KEEP_MS
from domain.limits import FollowTuning, Limits, Policy, WaitPolicy

API_TOKEN_MIN_CHARS = 16


def _store_address(value: Any) -> Any:
    return StoreAddress.parse(value) if isinstance(value, str) else value


# HELPER_STORE_URL, parsed when the settings load; code may also set the field to a URL's text or a StoreAddress.
StoreUrl = Annotated[StoreAddress, BeforeValidator(_store_address)]


class SettingsError(ValueError):
    pass


def _whole(value: object) -> object:
    """A whole number as the seed writes them: digits, `_` allowed between them (`2_700_000`)."""
    if not isinstance(value, str):
        return value
    try:
        return int(value.replace("_", ""))
    except ValueError:
        raise PydanticCustomError("whole_number", "expected a whole number") from None


def _flag(value: object) -> object:
    """A yes or no: 1/true/yes or 0/false/no, in any case."""
    if not isinstance(value, str):
        return value
    word = value.strip().lower()
    if word in ("1", "true", "yes"):
        return True
    if word in ("0", "false", "no"):
        return False
    raise PydanticCustomError("flag", "expected true or false")


def _wholes(value: object) -> object:
    """Whole numbers separated by commas (`7200000,43200000`); blank is none."""
    if not isinstance(value, str):
        return value
    return [_whole(part.strip()) for part in value.split(",") if part.strip()]


Whole = Annotated[int, BeforeValidator(_whole)]
Wholes = Annotated[tuple[int, ...], BeforeValidator(_wholes)]
Flag = Annotated[bool, BeforeValidator(_flag)]


class Section(BaseModel):
    """A part of the tree. Its fields are read from the variables their aliases name, and set by name in code."""

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, extra="forbid")
    # Whether a variable set to blanks counts as not set (the service's and the codec server's variables).
    blank_is_unset: ClassVar[bool] = False


class PolicyVariables(Section):
    """The variables of the owner policy (`domain.limits.Policy`, its `Limits` and `FollowTuning`), which keep
    the defaults and the ranges: a variable not set (None) leaves the domain's default."""

    max_open: Whole | None = Field(None, validation_alias="HELPER_MAX_OPEN")
    max_running: Whole | None = Field(None, validation_alias="HELPER_MAX_RUNNING")
    max_rows: Whole | None = Field(None, validation_alias="HELPER_MAX_ROWS")
    keep_ms: Whole | None = Field(None, validation_alias="HELPER_KEEP_MS")
    summary_max: Whole | None = Field(None, validation_alias="HELPER_SUMMARY_MAX")
    check_ms: Whole | None = Field(None, validation_alias="HELPER_CHECK_MS")
    deadline_ms: Whole | None = Field(None, validation_alias="HELPER_DEADLINE_MS")
    grace_ms: Whole | None = Field(None, validation_alias="HELPER_GRACE_MS")
    ceiling_tokens: Whole | None = Field(None, validation_alias="HELPER_CEILING_TOKENS")
    max_steps: Whole | None = Field(None, validation_alias="TURN_MAX_STEPS_HELPER")
    max_input_tokens: Whole | None = Field(None, validation_alias="HELPER_INPUT_CEILING_TOKENS")
    poll_ms: Whole | None = Field(None, validation_alias="HELPER_POLL_MS")
    wait_ms: Whole | None = Field(None, validation_alias="HELPER_LONG_POLL_MS")
    window_ms: Whole | None = Field(None, validation_alias="HELPER_FOLLOW_WINDOW_MS")
    resume_ms: Whole | None = Field(None, validation_alias="HELPER_FOLLOW_RESUME_MS")
    silence_ms: Whole | None = Field(None, validation_alias="HELPER_CORE_SILENCE_MS")
    bad_answers: Whole | None = Field(None, validation_alias="HELPER_CORE_BAD_ANSWERS")
    remind_after_ms: Wholes | None = Field(None, validation_alias="HELPER_WAIT_REMIND_MS")
    expire_after_ms: Whole | None = Field(None, validation_alias="HELPER_WAIT_EXPIRE_MS")

    def policy(self) -> Policy:
        """The domain's policy with the variables set; a value out of the domain's range is an error naming its
        variable (each is checked alone, so the error is the variable's own)."""
        parts: dict[type[BaseModel], dict[str, Any]] = {Policy: {}, Limits: {}, FollowTuning: {}, WaitPolicy: {}}
        for name, value in self.model_dump(exclude_none=True).items():
            model = next(model for model in (Limits, FollowTuning, WaitPolicy, Policy) if name in model.model_fields)
            try:
                model.model_validate({name: value})
            except ValidationError as error:
                variable = str(type(self).model_fields[name].validation_alias)
                raise SettingsError(f"{variable}={value!r}: {error.errors()[0]['msg']}") from None
            parts[model][name] = value
        try:
            return Policy(
                **parts[Policy],
                limits=Limits(**parts[Limits]),
                follow=FollowTuning(**parts[FollowTuning]),
                wait=WaitPolicy(**parts[WaitPolicy]),
            )
        except ValidationError as error:  # the one rule between variables: the wait's expiry within the keep
            message = str(error.errors()[0]["msg"]).removeprefix("Value error, ")
            raise SettingsError(f"{type(self).model_fields['expire_after_ms'].validation_alias}: {message}") from None


class ServiceSettings(Section):
    """The starter API's (`helper-starter serve`): where it listens, who may call it, the bounds on each request."""

    blank_is_unset: ClassVar[bool] = True

    bind: str = Field("127.0.0.1:8340", validation_alias="HELPER_API_BIND")  # host:port
    # Authorization: Bearer <token> on every /v1 request
    token: str | None = Field(None, validation_alias="HELPER_API_TOKEN", repr=False)
    # PEM certificate chain; with tls_key, the service speaks HTTPS only
    tls_cert: Path | None = Field(None, validation_alias="HELPER_API_TLS_CERT")
    tls_key: Path | None = Field(None, validation_alias="HELPER_API_TLS_KEY")
    # A start's task is at most 20,000 characters.
    max_body_bytes: Whole = Field(256 * 1024, gt=0, validation_alias="HELPER_API_MAX_BODY_BYTES")
    # A request not in whole (headers and body) by then is closed.
    read_timeout_ms: Whole = Field(5_000, gt=0, validation_alias="HELPER_API_READ_TIMEOUT_MS")
    # A read's bound; a write's is HELPER_STARTER_TIMEOUT_MS.
    request_timeout_ms: Whole = Field(10_000, gt=0, validation_alias="HELPER_API_REQUEST_TIMEOUT_MS")
    # A live-lines stream ends after this; the caller reconnects.
    watch_max_ms: Whole = Field(3_600_000, gt=0, validation_alias="HELPER_API_WATCH_MAX_MS")
    # Streams open at once; one more is answered 503.
    max_watches: Whole = Field(500, gt=0, validation_alias="HELPER_API_MAX_WATCHES")
    # Requests in flight may finish this long after SIGTERM.
    shutdown_grace_ms: Whole = Field(20_000, ge=0, validation_alias="HELPER_API_SHUTDOWN_GRACE_MS")
    # PostgreSQL connections for the reads.
    store_pool_size: Whole = Field(10, gt=0, validation_alias="HELPER_API_STORE_POOL_SIZE")

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

    def problem(self) -> str | None:
        """Why the service must not start with these settings, or None: it is safe by default (R47)."""
        host, _, port = self.bind.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            return f"HELPER_API_BIND={self.bind!r}: expected host:port, such as 127.0.0.1:8340"
        if self.token is not None and len(self.token) < API_TOKEN_MIN_CHARS:
            return f"HELPER_API_TOKEN is too short: at least {API_TOKEN_MIN_CHARS} characters"
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


class CodecServerSettings(Section):
    """The codec server's (`python -m codec serve`, docs/codec-server.md): where it listens, for which Web UI, who
    may read. `codec.auth.auth_settings` checks the credentials' settings together."""

    blank_is_unset: ClassVar[bool] = True

    host: str = Field("127.0.0.1", validation_alias="HELPER_CODEC_HOST")
    port: Whole = Field(8330, gt=0, lt=65536, validation_alias="HELPER_CODEC_PORT")
    origins: str = Field("http://127.0.0.1:8233,http://localhost:8233", validation_alias="HELPER_CODEC_ORIGINS")
    max_body_bytes: Whole = Field(4 * 1024 * 1024, gt=0, validation_alias="HELPER_CODEC_MAX_BODY_BYTES")
    token: str | None = Field(None, validation_alias="HELPER_CODEC_TOKEN", repr=False)
    namespaces: str = Field("default", validation_alias="HELPER_CODEC_NAMESPACES")
    oidc_issuer: str | None = Field(None, validation_alias="HELPER_CODEC_OIDC_ISSUER")
    oidc_audience: str | None = Field(None, validation_alias="HELPER_CODEC_OIDC_AUDIENCE")
    oidc_jwks_url: str | None = Field(None, validation_alias="HELPER_CODEC_OIDC_JWKS_URL")
    oidc_subjects: str | None = Field(None, validation_alias="HELPER_CODEC_OIDC_SUBJECTS")
    oidc_groups: str | None = Field(None, validation_alias="HELPER_CODEC_OIDC_GROUPS")
    oidc_groups_claim: str = Field("groups", validation_alias="HELPER_CODEC_OIDC_GROUPS_CLAIM")

    @property
    def origin_list(self) -> list[str]:
        return self.origins.split(",")


class LoggingSettings(Section):
    # The worker's log level; httpx's line per request is kept at WARNING.
    level: str = Field("INFO", validation_alias="HELPER_LOG_LEVEL")

    @field_validator("level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value not in logging.getLevelNamesMapping():
            raise ValueError(f"expected one of {', '.join(sorted(logging.getLevelNamesMapping()))}")
        return value


class Settings(Section):
    """The tree's root: what every process reads, with the starter API's, the codec server's and the logging
    settings as its parts."""

    temporal_address: str = Field("127.0.0.1:7233", validation_alias="TEMPORAL_ADDRESS")
    temporal_namespace: str = Field("default", validation_alias="TEMPORAL_NAMESPACE")
    task_queue: str = Field("helpers", validation_alias="HELPER_TASK_QUEUE")
    # Parsed once, here: every process connects to, describes and scrubs this one value (config.store_address). Its
    # text may hold a password, so an error never shows it.
    store: StoreUrl = Field(
        StoreAddress.parse("sqlite+aiosqlite:///data/helpers.sqlite3"), validation_alias="HELPER_STORE_URL", repr=False
    )
    results_dir: Path = Field(Path("data/results"), validation_alias="HELPER_RESULTS_DIR")
    core_url: str = Field("http://127.0.0.1:8310", validation_alias="HELPER_CORE_URL")
    chat_url: str = Field("http://127.0.0.1:8320", validation_alias="HELPER_CHAT_URL")
    # The worker's clients read no proxy from the environment (HTTP_PROXY and the like): only these, when set.
    core_proxy: str | None = Field(None, validation_alias="HELPER_CORE_PROXY")
    chat_proxy: str | None = Field(None, validation_alias="HELPER_CHAT_PROXY")
    # None: yes for SQLite (the local default), no otherwise
    migrate_on_start: Flag | None = Field(None, validation_alias="HELPER_MIGRATE_ON_START")
    # Slots of the short activities (admission, open, finish, cancel, reset, chat offers, Goal checks, the sweep):
    # each is bounded by HELPER_CHECK_MS or 30 s. 100 of them still pass ~7 calls a second through a core that
    # takes the whole 15 s bound, many times the rate at which thousands of running helpers end.
    max_concurrent_activities: Whole = Field(100, gt=0, validation_alias="HELPER_MAX_CONCURRENT_ACTIVITIES")
    # Slots of the follows, on their own task queue (protocol.names.follows_task_queue): every running helper
    # holds one for its whole run, an idle long poll to the core. A replica's advertised capacity is 2,000 running
    # helpers; 2,500 slots keep a fifth of them free there (python -m tools.bench.capacity; docs/operations.md,
    # "Scaling").
    max_concurrent_follows: Whole = Field(2_500, gt=0, validation_alias="HELPER_MAX_CONCURRENT_FOLLOWS")
    # Every starter write is answered within this (R48): done, accepted by Temporal but not yet answered, or not
    # taken (protocol.deadlines). It covers connecting to Temporal too.
    starter_timeout_ms: Whole = Field(10_000, ge=1_000, validation_alias="HELPER_STARTER_TIMEOUT_MS")
    # The most writes one starter process (the HTTP service, a HelperClient) has in flight; within it the number
    # follows what the runtime answers in time, more wait their turn while their bound allows, else are refused
    # `busy` before anything is sent (starter.backpressure).
    starter_max_in_flight: Whole = Field(256, gt=0, validation_alias="HELPER_STARTER_MAX_IN_FLIGHT")
    # Whether writes carry an accept-by time for the coordinator to check: off only for a Temporal server whose
    # clock does not follow the wall clock (the time-skipping test server).
    starter_accept_by: Flag = Field(True, validation_alias="HELPER_STARTER_ACCEPT_BY")
    # host:port for the worker's Prometheus metrics; off when unset
    metrics_bind: str | None = Field(None, validation_alias="HELPER_METRICS_BIND")
    # host:port for the worker's /livez and /readyz; off when unset
    health_bind: str | None = Field(None, validation_alias="HELPER_HEALTH_BIND")
    # id:base64key,... encrypts payloads when set
    codec_keys: str | None = Field(None, validation_alias="HELPER_CODEC_KEYS", repr=False)
    # The key new payloads use; default the first.
    codec_key_id: str | None = Field(None, validation_alias="HELPER_CODEC_KEY_ID")
    # With keys, unencrypted payloads are refused (R39); allow them only while histories written in clear run out.
    codec_allow_plaintext: Flag = Field(False, validation_alias="HELPER_CODEC_ALLOW_PLAINTEXT")
    # Whether running without keys is refused; None: required unless Temporal is on this machine (the local run).
    codec_required: Flag | None = Field(None, validation_alias="HELPER_CODEC_REQUIRED")
    # Tracing (observability/tracing.py): None follows the OTLP endpoints; True or False forces it on or off.
    tracing: Flag | None = Field(None, validation_alias="HELPER_TRACING")
    # Read only to decide whether tracing is on and what the process is called; the OTLP exporter reads its own
    # OTEL_* variables (these too) when it exports.
    otlp_endpoint: str | None = Field(None, validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    otlp_traces_endpoint: str | None = Field(None, validation_alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    otel_service_name: str | None = Field(None, validation_alias="OTEL_SERVICE_NAME")
    # Worker Versioning (docs/operations.md, "Releases"): every worker polls as one build of one Worker Deployment.
    deployment_name: str = Field("helper-runtime", min_length=1, validation_alias="HELPER_DEPLOYMENT_NAME")
    # One build per release; workflows started on it stay on it (PINNED) until they end.
    build_id: str = Field(default_factory=lambda: release_build_id(), min_length=1, validation_alias="HELPER_BUILD_ID")
    # Make this build the deployment's current version once the worker polls: right for one worker (the local run,
    # the tests); a cluster promotes a new build by hand while the old one drains (docs/operations.md).
    promote_build: Flag = Field(True, validation_alias="HELPER_PROMOTE_BUILD")
    # How long the record of a wait for the owner is kept after the wait ended (R56): 30 days.
    audit_keep_ms: Whole = Field(AUDIT_KEEP_MS, gt=0, validation_alias="HELPER_AUDIT_KEEP_MS")
    # The owner policy's limits, read through their variables (`PolicyVariables`).
    policy: Policy = Policy()
    service: ServiceSettings = ServiceSettings()
    codec: CodecServerSettings = CodecServerSettings()
    logging: LoggingSettings = LoggingSettings()

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
        return bool(self.otlp_traces_endpoint or self.otlp_endpoint)

    def tracing_name(self, process: str) -> str:
        """What traces call this process: OTEL_SERVICE_NAME when set, else `process`."""
        return self.otel_service_name or process

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

    def store_pointer(self) -> str:
        """How to point this process at the right store, for a message naming the store it found missing."""
        store = variable("store")
        if "store" not in self.model_fields_set:
            return (
                f"{store} is not set (so the default, under the current folder): set it, or set {ENV_FILE_VARIABLE} "
                f"to the running stack's <checkout>/{DEFAULT_FILE}"
            )
        return f"{store} points there; set it to the right store, or {ENV_FILE_VARIABLE} to a file that does"

    @property
    def migrates_on_start(self) -> bool:
        if self.migrate_on_start is not None:
            return self.migrate_on_start
        return self.store.dialect == "sqlite"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, local_file: bool = False) -> Settings:
        """The settings the variables of `env` (default: the process environment) give; the rest at defaults. With
        `local_file`, the local stack's settings file fills in what the environment lacks (config.local_env)."""
        env = os.environ if env is None else env
        if local_file:
            try:
                env = with_local_env(env)
            except LocalEnvError as error:
                raise SettingsError(str(error)) from None
        try:
            return cls.model_validate(_read(cls, env))
        except ValidationError as error:
            raise SettingsError(_named(error, env)) from None


def _read(model: type[Section], env: Mapping[str, str]) -> dict[str, Any]:
    """The values `env` sets for `model`'s fields, keyed by variable, nested as its sections are."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        section = field.annotation if isinstance(field.annotation, type) else None
        if section is Policy:  # the domain's model, read through its variables
            if nested := _read(PolicyVariables, env):
                values[name] = PolicyVariables.model_validate(nested).policy()
        elif section is not None and issubclass(section, Section):
            if nested := _read(section, env):
                values[name] = nested
        elif isinstance(field.validation_alias, str) and field.validation_alias in env:
            raw = env[field.validation_alias]
            if raw.strip() or not model.blank_is_unset:
                values[field.validation_alias] = raw
    return values


# Temporal's own client settings: the SDK reads them (temporalio.envconfig) as the `temporal` CLI does, when a process
# connects to Temporal (protocol.connection).
TEMPORAL_CLIENT_VARIABLES = (
    "TEMPORAL_CONFIG_FILE",
    "TEMPORAL_PROFILE",
    "TEMPORAL_API_KEY",
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
)


# Variables an earlier release read and this one does not, each with why: the worker says so at its start, so a
# deployment that still sets one learns that it changes nothing.
RETIRED_VARIABLES = {
    "HELPER_FOLLOW_LIVENESS_MS": "a follow sends no heartbeats; a dead replica's follows are found through the "
    'replicas\' liveness records (docs/operations.md, "Failures")',
}


def retired_variables_set(env: Mapping[str, str] | None = None) -> list[str]:
    """One line for each retired variable `env` (default: the process environment) still sets."""
    env = os.environ if env is None else env
    return [f"{name} is no longer read: {why}" for name, why in RETIRED_VARIABLES.items() if name in env]


def tree_variables(
    model: type[Section] = Settings, *, only: Collection[str] | None = None, without: Collection[str] = ()
) -> Iterator[tuple[str, object]]:
    """Every variable `model` reads, in the tree's order, with its default (the policy's are the domain's): of its
    fields named in `only` when given, and not of those in `without` (a section's name leaves out its part)."""
    for name, field in model.model_fields.items():
        if name in without or (only is not None and name not in only):
            continue
        if field.annotation is Policy:
            domain = {
                **Policy().model_dump(),
                **Limits().model_dump(),
                **FollowTuning().model_dump(),
                **WaitPolicy().model_dump(),
            }
            for part, variable in PolicyVariables.model_fields.items():
                yield str(variable.validation_alias), domain[part]
        elif isinstance(field.annotation, type) and issubclass(field.annotation, Section):
            yield from tree_variables(field.annotation)
        else:
            yield str(field.validation_alias), field.get_default(call_default_factory=True)


def variable(field: str, model: type[Section] = Settings) -> str:
    """The variable a field of `model` is read from."""
    return str(model.model_fields[field].validation_alias)


def _named(error: ValidationError, env: Mapping[str, str]) -> str:
    """The first problem, as `VARIABLE='value': what is wrong` (a secret's value shown as ***)."""
    problem = error.errors()[0]
    variable = next((str(part) for part in reversed(problem["loc"]) if str(part) in env), None)
    if variable is None:
        return f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}"
    shown = "***" if variable in _SECRETS else repr(env[variable])
    return f"{variable}={shown}: {problem['msg']}"


def _secret_variables(model: type[Section]) -> set[str]:
    found: set[str] = set()
    for field in model.model_fields.values():
        if isinstance(field.annotation, type) and issubclass(field.annotation, Section):
            found |= _secret_variables(field.annotation)
        elif not field.repr and isinstance(field.validation_alias, str):
            found.add(field.validation_alias)
    return found


def release_build_id() -> str:
    """The installed release's version: the build id a worker polls as unless HELPER_BUILD_ID names another."""
    return version("helper-runtime")


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


# The variables whose values an error never shows: the fields kept out of repr.
_SECRETS = frozenset(_secret_variables(Settings))
