"""Connecting to Temporal with the data converter every part of the runtime must share."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.converter import PayloadCodec
from temporalio.envconfig import ClientConfig, ClientConnectConfig
from temporalio.runtime import Runtime

from codec.encryption import CodecError, codec_from, data_converter
from config.settings import Settings
from observability import tracing


async def connect_temporal(
    address: str,
    namespace: str = "default",
    runtime: Runtime | None = None,
    codec: PayloadCodec | None = None,
    config: ClientConnectConfig | None = None,
) -> Client:
    """Connect to `address`/`namespace`; TLS and API keys come from Temporal's own environment variables
    (TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH, ...) or a temporal.toml profile, as
    for the `temporal` CLI, so Temporal Cloud and mTLS clusters need no code here."""
    connect: ClientConnectConfig = {**(ClientConfig.load_client_connect_config() if config is None else config)}
    connect["target_host"] = address
    connect["namespace"] = namespace
    # Pydantic models (UUIDs, datetimes, enums) cross Temporal intact only with this converter; with a codec
    # every payload is encrypted before it leaves the process.
    # With tracing on (observability/tracing.py) the tracing interceptor; workers built on this client inherit it.
    return await Client.connect(
        **connect, data_converter=data_converter(codec), runtime=runtime, interceptors=tracing.interceptors()
    )


def with_temporal_profile(settings: Settings) -> tuple[Settings, ClientConnectConfig]:
    """The settings with Temporal's address and namespace found as the `temporal` CLI finds them: set
    explicitly (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, or in code), else from the temporal.toml profile
    (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE), else the local defaults; and the rest of that configuration
    (TLS, API key). Loaded only to connect: the starter's reads never pay for it."""
    try:
        config = ClientConfig.load_client_connect_config()
    except Exception as error:  # a malformed temporal.toml: say which setting is wrong, not a traceback
        raise CodecError(
            f"Temporal's client configuration cannot be read (temporal.toml, TEMPORAL_*): {error}"
        ) from None
    given = settings.model_fields_set
    update: dict[str, str] = {}
    if "temporal_address" not in given and config.get("target_host"):
        update["temporal_address"] = str(config["target_host"])
    if "temporal_namespace" not in given and config.get("namespace"):
        update["temporal_namespace"] = str(config["namespace"])
    return (settings.model_copy(update=update) if update else settings), config


async def connect_for(settings: Settings, runtime: Runtime | None = None) -> Client:
    """Connect as the settings (and Temporal's own configuration) say, encrypting payloads when codec keys are
    configured; without keys, only when encryption is not required for the address connected to (R39)."""
    settings, config = with_temporal_profile(settings)
    problem = settings.encryption_problem()
    if problem is not None:
        raise CodecError(problem)
    codec = codec_from(settings.codec_keys, settings.codec_key_id, allow_plaintext=settings.codec_allow_plaintext)
    return await connect_temporal(settings.temporal_address, settings.temporal_namespace, runtime, codec, config)
