"""The current build's recorded histories, one per path, replay against today's workflow code (R19, R25, R45).

Workflows stay on the build they started on (Worker Versioning), so the code of a build must make exactly the
decisions its own histories recorded: a change that adds a command, reorders an activity or drops a signal fails
here, and then belongs to a new build (docs/operations.md, "Releases"). `python -m tests.replay.record` records
the histories.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from config.settings import release_build_id
from worker import WORKFLOWS

BUILD_HISTORIES = Path(__file__).parent / "histories" / release_build_id()
HISTORIES = sorted(BUILD_HISTORIES.glob("*.json"))
EXPECTED = {
    "helper-completed",
    "helper-question",
    "helper-authorization",
    "helper-work-ceiling",
    "helper-failed",
    "helper-closed-running",
    "helper-closed-waiting",
    "helper-interrupted",
    "helper-deadline-partial",
    "helper-hard-ceiling",
    "helper-lost-create",
    "helper-follow-up",
    "coordinator-lifecycle",
    "coordinator-regrant",
    "coordinator-withdrawn-event",
    "coordinator-answers",
    "coordinator-wait",
    "goal-check",
    "sweep",
}


def test_every_path_of_the_build_has_a_recorded_history() -> None:
    """R18, R45: exactly one recorded history per path, in the folder of the build the worker polls as."""
    found = {path.stem for path in HISTORIES}
    assert found == EXPECTED, f"record them with python -m tests.replay.record ({BUILD_HISTORIES})"


@pytest.mark.parametrize("path", HISTORIES, ids=[path.stem for path in HISTORIES])
async def test_recorded_history_replays(path: Path) -> None:
    """R19, R25: today's code makes exactly the decisions recorded in this history."""
    history = WorkflowHistory.from_json(path.stem, await asyncio.to_thread(path.read_text))
    replayer = Replayer(
        workflows=WORKFLOWS,  # exactly what the worker runs
        data_converter=pydantic_data_converter,
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.stem}: {result.replay_failure}"
