"""Connecting to Temporal with the data converter every part of the runtime must share."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.converter import PayloadCodec
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime

from codec.encryption import codec_from, data_converter
from domain.settings import Settings


async def connect_temporal(
    address: str, namespace: str = "default", runtime: Runtime | None = None, codec: PayloadCodec | None = None
) -> Client:
    """Connect to `address`/`namespace`; TLS and API keys come from Temporal's own environment variables
    (TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH, ...) or a temporal.toml profile, as
    for the `temporal` CLI, so Temporal Cloud and mTLS clusters need no code here."""
    config = ClientConfig.load_client_connect_config()
    config["target_host"] = address
    config["namespace"] = namespace
    # Pydantic models (UUIDs, datetimes, enums) cross Temporal intact only with this converter; with a codec
    # every payload is encrypted before it leaves the process.
    return await Client.connect(**config, data_converter=data_converter(codec), runtime=runtime)


async def connect_for(settings: Settings, runtime: Runtime | None = None) -> Client:
    """Connect as the settings say, encrypting payloads when codec keys are configured."""
    codec = codec_from(settings.codec_keys, settings.codec_key_id)
    return await connect_temporal(settings.temporal_address, settings.temporal_namespace, runtime, codec)
