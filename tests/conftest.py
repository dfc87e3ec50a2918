"""Shared fixtures: real Temporal servers from the PyPI wheels, stores on SQLite and PostgreSQL, settings."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from protocol.names import HELPER_OUTCOME, HELPER_OWNER, HELPER_STATE

SEARCH_KEYS = [HELPER_OWNER, HELPER_STATE, HELPER_OUTCOME]
BIN = Path(sys.executable).parent
TEMPORAL_CLI = BIN / "temporal"
TEST_SERVER = BIN / "temporal-test-server"
# Task-queue fairness (off by default on a self-hosted server): an owner's tasks are dispatched round-robin with
# other owners' (protocol.names.owner_priority), as on a cluster with matching.enableFairness.
FAIRNESS = ["--dynamic-config-value", "matching.enableFairness=true"]
# Every test has its own pair of task queues, all in one deployment version of one server per test process; the
# server's default of 100 task queues per version would refuse the workers of the fifty-first test.
MANY_TASK_QUEUES = ["--dynamic-config-value", "matching.maxTaskQueuesInDeploymentVersion=100000"]
POSTGRES_URL = os.environ.get("HELPER_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """The Temporal CLI dev server (in memory), with the project's search attributes registered."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL_CLI),
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_KEYS,
        dev_server_log_level="error",
        dev_server_extra_args=[*FAIRNESS, *MANY_TASK_QUEUES],
    )
    yield env
    await env.shutdown()


@pytest.fixture
async def time_env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server: a 47-minute ceiling passes in seconds."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(TEST_SERVER), data_converter=pydantic_data_converter
    )
    await register_search_attributes(env)
    yield env
    await env.shutdown()


async def register_search_attributes(env: WorkflowEnvironment) -> None:
    """The test server starts without them, and an unregistered attribute fails the workflow task."""
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in SEARCH_KEYS},
        )
    )
