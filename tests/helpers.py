"""Small tools the tests share: waiting for a condition, building requests."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from domain.limits import FollowTuning, Limits, Policy
from domain.requests import HelperRequest
from domain.settings import Settings

T = TypeVar("T")


async def eventually(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
    """Poll `check` until it returns something truthy; fail with the last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        value = check()
        if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
            value = await value
        last = value
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s; last value: {last!r}")


def helper_request(owner: str, helper_id: str, task: str = "Find the Q3 report", **fields: Any) -> HelperRequest:
    return HelperRequest(owner=owner, helper_id=helper_id, task=task, model=fields.pop("model", "scripted"), **fields)


def settings_for(tmp_path: Path, core_url: str, chat_url: str, **policy: object) -> Settings:
    """Settings for one test: its own store, result directories and task queue; fast following."""
    follow = policy.pop("follow", FollowTuning(poll_ms=50, window_ms=100, resume_ms=60_000, silence_ms=600_000))
    limits = policy.pop("limits", Limits())
    return Settings(
        task_queue=f"helpers-{uuid.uuid4().hex[:8]}",
        store_url=f"sqlite+aiosqlite:///{tmp_path / 'helpers.sqlite3'}",
        results_dir=tmp_path / "results",
        core_url=core_url,
        chat_url=chat_url,
        policy=Policy(limits=limits, follow=follow, **policy),
    )


async def skip_time(env: Any, duration: timedelta, chunk: timedelta = timedelta(minutes=5)) -> None:
    """Let the time-skipping server advance `duration`, in chunks so no single sleep call times out."""
    remaining = duration
    while remaining > timedelta(0):
        step = min(chunk, remaining)
        await env.sleep(step)
        remaining -= step


async def history_events(client: Any, workflow_id: str) -> list[Any]:
    """Every event of a workflow's history, to count what a helper costs the server."""
    return [event async for event in client.get_workflow_handle(workflow_id).fetch_history_events()]
