"""`make run` says when one of its processes ends on its own, and reaps it: which, its pid, how it ended, its log, and
what goes on without it; and it names the settings file a second shell uses, as that shell finds it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from tests.helpers import free_stack_ports
from tools.demo.__main__ import resumed_text
from tools.demo.stack import Stack

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie nobody reaped), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


async def test_a_replica_that_dies_is_reported_with_its_signal_and_log_and_reaped(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "data", free_stack_ports(), workers=2)
    stack.prepare(fresh=True)
    lines: list[str] = []
    said = asyncio.Event()

    def say(line: str) -> None:
        lines.append(line)
        said.set()

    try:
        for name in stack.worker_names:
            stack._spawn(name, SLEEPER)  # stand-ins for the replicas: the report does not depend on what runs
        first, second = (stack.pid(name) for name in stack.worker_names)
        reporting = asyncio.create_task(stack.report_exits(say, interval_s=0.1))
        os.kill(first, signal.SIGKILL)
        await asyncio.wait_for(said.wait(), 10)
        assert lines == [
            f"worker-1 (pid {first}) was killed by SIGKILL; its log: {stack.logs}/worker-1.log. It is not restarted: "
            "the other replicas (worker-2) go on with its helpers."
        ]
        assert _state(first) is None, "the dead replica is left a zombie"

        said.clear()
        os.kill(second, signal.SIGTERM)
        await asyncio.wait_for(said.wait(), 10)
        assert lines[1] == (
            f"worker-2 (pid {second}) was killed by SIGTERM; its log: {stack.logs}/worker-2.log. It is not restarted: "
            "helpers wait until it runs again: press Ctrl-C, then `make run` again (the data is kept)."
        )
        assert _state(second) is None and stack.processes == []
        reporting.cancel()
    finally:
        stack.stop()


def test_a_process_that_exits_is_told_with_its_code() -> None:
    stack = Stack(Path("/srv/data"))
    assert stack.exit_line("reference-core", 4321, 1) == (
        "reference-core (pid 4321) exited with code 1; its log: /srv/data/logs/reference-core.log. It is not "
        "restarted: helpers wait until it runs again: press Ctrl-C, then `make run` again (the data is kept)."
    )


def test_the_settings_file_is_named_as_a_second_shell_finds_it(tmp_path: Path) -> None:
    """`make run` writes data/local.env, which the starter reads by itself from the checkout; `make demo` writes
    data/demo/local.env, which it does not, so the line says how to name it."""
    run = Stack(tmp_path / "data")
    assert (
        run.env_file_hint(tmp_path) == f"{tmp_path}/data/local.env (the starter reads it by itself from the checkout)"
    )
    demo = Stack(tmp_path / "data" / "demo")
    assert demo.env_file_hint(tmp_path) == (
        f"{tmp_path}/data/demo/local.env (the starter reads data/local.env by itself; for this one: "
        f"export HELPER_ENV_FILE={tmp_path}/data/demo/local.env)"
    )


def test_a_second_make_run_says_the_demo_helpers_are_not_started_again_and_how_to_see_them(tmp_path: Path) -> None:
    """A restart on a kept data folder resumes without the demo scenario: it says so, and how to start over (`make
    clean` for the checkout's data/, removing the folder for one named with DATA=)."""
    said = resumed_text({"anna": 9, "boris": 1}, tmp_path / "data", tmp_path)
    assert said.startswith("Resumed the stack of an earlier run: the store still holds its rows (anna 9, boris 1)")
    assert "The demo helpers are not started again: they run only on a fresh data folder." in said
    assert "stop this (Ctrl-C), then `make clean` and `make run` again, or `make demo`, which runs them" in said
    elsewhere = resumed_text({"anna": 0, "boris": 0}, tmp_path / "mine", tmp_path)
    assert f"then remove {tmp_path}/mine/ and start it again" in elsewhere and "make clean" not in elsewhere
