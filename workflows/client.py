"""Connecting to Temporal with the data converter every part of the runtime must share."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter


async def connect_temporal(address: str, namespace: str = "default") -> Client:
    # Pydantic models (UUIDs, datetimes, enums) cross Temporal intact only with this converter.
    return await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)
