"""The starter checks the model against the core's catalog before anything is admitted."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from domain.goals import Goal
from protocol.errors import InvalidRequest
from tests.fakes.fake_core import FakeCore
from tests.helpers import eventually, helper_request
from tests.integration.stack import time_stack


async def test_a_model_the_core_does_not_offer_is_refused_with_the_list(
    time_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A model missing from `GET /v1/models` is an invalid request naming the models offered: no row, no
    workflow, no session, no Goal. An offered model is admitted."""
    core = FakeCore(models=["scripted", "openai:gpt-4o-mini"])
    async with time_stack(time_env, tmp_path, core) as stack:
        with pytest.raises(InvalidRequest, match=r"'gpt-5' is not offered .* it offers: scripted, openai:gpt-4o-mini"):
            await stack.client.start(helper_request("mo", "h1", model="gpt-5"))
        goal = Goal(owner="mo", goal_id="inbox", every_ms=3_600_000, task="Check the inbox", model="gpt-5")
        with pytest.raises(InvalidRequest, match="not offered"):
            await stack.client.add_goal(goal)
        # (the time-skipping server has no Schedules: had the Goal reached Temporal, the add would have failed)
        assert await stack.store.get("mo", "h1") is None and core.create_calls == 0

        await stack.client.start(helper_request("mo", "h2", model="scripted"))
        await eventually(lambda: core.session_of("h2"))


@pytest.mark.parametrize("how", ["no catalog", "slow catalog"])
async def test_without_an_answering_catalog_the_create_decides(
    time_env: WorkflowEnvironment, tmp_path: Path, how: str
) -> None:
    """A core without the endpoint (404), or one that does not answer it within a few seconds, does not stop
    an admission: the create is where such a core refuses a model."""
    core = FakeCore(models=None) if how == "no catalog" else FakeCore(models=["x"], models_delay_s=30)
    async with time_stack(time_env, tmp_path, core) as stack:
        await stack.client.start(helper_request("mo", "h1", model="anything"))
        await eventually(lambda: core.session_of("h1"))
