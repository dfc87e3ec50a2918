"""Recorded histories of every outcome path replay against today's workflow code (R19, R25).

A change that would break running helpers or coordinators (a new command, a reordered activity, a removed
signal) fails here instead of in production. `python -m tests.replay.record` records new histories.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from worker import WORKFLOWS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))
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
    "helper-follow-up-v4",
    "coordinator-lifecycle",
    "coordinator-regrant-v5",
    "goal-check",
    "sweep",
}


def test_every_outcome_path_has_a_recorded_history() -> None:
    """R18: at least one recorded history per outcome path, so none can silently lose its replay guard
    (later generations of a path are kept beside the first, as <name>-<suffix>.json)."""
    assert {path.stem for path in HISTORIES} >= EXPECTED


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
