"""Connecting to Temporal with the data converter every part of the runtime must share."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime


async def connect_temporal(address: str, namespace: str = "default", runtime: Runtime | None = None) -> Client:
    """Connect to `address`/`namespace`; TLS and API keys come from Temporal's own environment variables
    (TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH, ...) or a temporal.toml profile, as
    for the `temporal` CLI, so Temporal Cloud and mTLS clusters need no code here."""
    config = ClientConfig.load_client_connect_config()
    config["target_host"] = address
    config["namespace"] = namespace
    # Pydantic models (UUIDs, datetimes, enums) cross Temporal intact only with this converter.
    return await Client.connect(**config, data_converter=pydantic_data_converter, runtime=runtime)
