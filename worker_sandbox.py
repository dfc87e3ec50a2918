"""The workflow sandbox, without two costs it pays on every payload.

The SDK's sandbox (temporalio 1.35) runs each call into a workflow instance as `exec` of a source string, which
Python compiles again on every call, inside the sandbox's import context. It does so for every activation and,
worse, for every payload sequence the worker encodes or decodes, to ask the instance which serialization
context the payloads belong to: six passes over each activation and its completion. In a quick helper that was
about a fifth of the worker's Python CPU (bench.helper_rate with py-spy: `_Instance._run_code` 25 % inclusive,
11 % of it compiling).

`SandboxRunner` keeps the sandbox whole (the same restrictions, the same per-run instance and modules, every
activation still inside it) and changes two things:
- each source string is compiled once per process (the SDK passes a handful of fixed strings), then `exec`'d;
- the serialization and external-store contexts are asked of the sandboxed instance directly. That answer is
  the SDK's own pure bookkeeping (the run's id, its pending commands), no workflow code runs in it.

It depends on the sandbox's private `_Instance` (`_run_code`, `globals_and_locals`). If a later SDK changes them,
`sandbox_runner` falls back to the SDK's runner with a warning instead of failing, and
tests/workflows/test_sandbox_runner.py fails so the upgrade is noticed.
"""

from __future__ import annotations

import functools
import logging
from types import CodeType
from typing import Any

from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

log = logging.getLogger("helper.worker")

try:
    from temporalio.worker.workflow_sandbox._runner import _Instance
except ImportError:  # pragma: no cover - an SDK without it; tests/workflows/test_sandbox_runner.py notices
    _Instance = None  # type: ignore[assignment,misc]

IN_SANDBOX = "__temporal_in_sandbox"  # the name the SDK binds its in-sandbox instance to


@functools.lru_cache(maxsize=64)
def _compiled(source: str) -> CodeType:
    return compile(source, "<string>", "exec")


def _fits(instance_class: Any) -> bool:
    """The private parts this module relies on are where it expects them."""
    return instance_class is not None and all(
        callable(getattr(instance_class, name, None))
        for name in ("_run_code", "get_serialization_context", "get_external_store_context")
    )


if _fits(_Instance):

    class _CompiledInstance(_Instance):
        def _run_code(self, code: str, **extra_globals: Any) -> None:
            # exec takes a code object as it takes a string: the same code runs, compiled once.
            super()._run_code(_compiled(code), **extra_globals)  # type: ignore[arg-type]

        def get_serialization_context(self, command_info: Any) -> Any:
            in_sandbox: Any = self.globals_and_locals.get(IN_SANDBOX)
            if in_sandbox is None:  # not created yet (or the SDK changed): ask as the SDK does
                return super().get_serialization_context(command_info)
            return in_sandbox.get_serialization_context(command_info)

        def get_external_store_context(self, command_info: Any) -> Any:
            in_sandbox: Any = self.globals_and_locals.get(IN_SANDBOX)
            if in_sandbox is None:
                return super().get_external_store_context(command_info)
            return in_sandbox.get_external_store_context(command_info)


class SandboxRunner(SandboxedWorkflowRunner):
    """The SDK's sandboxed runner with the two costs above taken out; see the module's docstring."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _CompiledInstance(det, self.runner_class, self.restrictions)


def sandbox_runner(restrictions: SandboxRestrictions) -> SandboxedWorkflowRunner:
    """`SandboxRunner` where the SDK has the parts it relies on, else the SDK's own runner."""
    if not _fits(_Instance):
        log.warning("this temporalio's sandbox is not the one worker_sandbox knows: using the SDK's runner as is")
        return SandboxedWorkflowRunner(restrictions=restrictions)
    return SandboxRunner(restrictions=restrictions)
