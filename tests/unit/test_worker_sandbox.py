"""The worker shares the deterministic layers between workflow runs instead of re-importing them for each run
(bench/helper_rate.py: about 8 ms of CPU per new workflow). The full default sandbox must still accept every
workflow, so a non-deterministic call in workflow code keeps failing in tests (here and in tests/replay)."""

from __future__ import annotations

import asyncio
import sys

import pytest
import temporalio.workflow
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from config.settings import Settings
from worker import DETERMINISTIC_LAYERS, WORKFLOW_RUNNER, WORKFLOWS, workflow_runner


@pytest.mark.parametrize("workflow_class", WORKFLOWS, ids=[cls.__name__ for cls in WORKFLOWS])
async def test_every_workflow_passes_the_full_default_sandbox(workflow_class: type) -> None:
    definition = temporalio.workflow._Definition.must_from_class(workflow_class)
    await asyncio.sleep(0)  # creating an instance needs a running loop
    SandboxedWorkflowRunner().prepare_workflow(definition)


@pytest.mark.parametrize("workflow_class", WORKFLOWS, ids=[cls.__name__ for cls in WORKFLOWS])
async def test_the_worker_creates_a_workflow_instance_without_importing_again(workflow_class: type) -> None:
    definition = temporalio.workflow._Definition.must_from_class(workflow_class)
    WORKFLOW_RUNNER.prepare_workflow(definition)  # the first instance may import what the host has not
    executed: list[str] = []
    finder_loads = sys.meta_path[:]

    class Watch:
        """Records every module a sandboxed import would find and execute again."""

        @staticmethod
        def find_spec(name: str, path: object = None, target: object = None) -> None:
            executed.append(name)
            return None

    sys.meta_path.insert(0, Watch)
    try:
        WORKFLOW_RUNNER.prepare_workflow(definition)
    finally:
        sys.meta_path[:] = finder_loads
    ours = [name for name in executed if name.split(".")[0] in DETERMINISTIC_LAYERS]
    assert ours == [], f"re-imported for each run: {ours}"


def test_the_sandbox_is_on_unless_the_operator_turns_it_off() -> None:
    assert workflow_runner(Settings.from_env({})) is WORKFLOW_RUNNER
    assert workflow_runner(Settings.from_env({"HELPER_WORKFLOW_SANDBOX": "true"})) is WORKFLOW_RUNNER
    assert isinstance(
        workflow_runner(Settings.from_env({"HELPER_WORKFLOW_SANDBOX": "false"})), UnsandboxedWorkflowRunner
    )
