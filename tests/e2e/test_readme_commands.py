"""The README's "Using it" commands, pasted as written into a second shell against a running local stack.

The stack is the one `make run` starts (`demo.stack.Stack`: dev server, worker, reference core and chat, codec
server), on free ports with its own data folder; the shell finds its settings through HELPER_ENV_FILE, as the
README says for a stack outside the checkout. Each command runs in its own `bash -c` from the checkout and must
exit as the README documents: every one 0, `watch` until interrupted.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from demo.stack import Ports, Stack
from tests.helpers import free_port_run

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_commands() -> list[str]:
    """The commands of the first shell block under "## Using it", continuation lines joined."""
    section = README.read_text().split("## Using it", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the README's 'Using it' section has no sh block"
    commands: list[str] = []
    pending = ""
    for line in block.group(1).splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        commands.append(pending + line)
        pending = ""
    return [command for command in commands if command.strip() and not command.lstrip().startswith("#")]


@pytest.fixture
async def local_stack(tmp_path: Path) -> AsyncIterator[Stack]:
    base = free_port_run(5)
    stack = Stack(tmp_path / "data", Ports(*range(base, base + 5)))
    try:
        await stack.start(fresh=True)
        yield stack
    finally:
        stack.stop()


def _second_shell(stack: Stack) -> dict[str, str]:
    """A new shell: none of the stack's variables, only the pointer to its settings file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))}
    return {**env, "HELPER_ENV_FILE": str(stack.env_file)}


def _watch_until_outcome(command: str, env: dict[str, str], timeout: float = 90) -> tuple[int, str]:
    """`watch` runs until Ctrl-C: read its lines until the helper has an outcome, then interrupt it."""
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command}"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    os.set_blocking(process.stdout.fileno(), False)
    while "outcome" not in seen:
        assert process.poll() is None, f"watch exited early ({process.returncode}): {seen}"
        assert time.monotonic() < deadline, f"no outcome within {timeout} s: {seen}"
        chunk = process.stdout.read()
        seen += chunk.decode(errors="replace") if chunk else ""
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=30)
    return code, seen


async def test_every_readme_command_works_from_a_second_shell(local_stack: Stack) -> None:
    """Issue 11: the README's commands, pasted as written into a second shell while the stack runs, each exit 0
    with one JSON answer (watch prints live lines, until Ctrl-C or at once with --once); none prints a
    traceback."""
    commands = readme_commands()
    assert len(commands) >= 10 and all(c.startswith(".venv/bin/helper-starter ") for c in commands), commands
    if not (ROOT / ".venv" / "bin" / "helper-starter").exists():
        # Run outside `make`'s virtual environment: the same commands, with this interpreter's console script.
        commands = [c.replace(".venv/bin/", f"{Path(sys.executable).parent}/", 1) for c in commands]
    env = _second_shell(local_stack)
    for command in commands:
        watching = " watch " in command
        if watching and "--once" not in command:
            code, lines = await asyncio.to_thread(_watch_until_outcome, command, env)
            assert code == 0, lines
            assert "report-q3" in lines
            continue
        done = await asyncio.to_thread(
            subprocess.run, ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, timeout=120
        )
        out, err = done.stdout.decode(), done.stderr.decode()
        assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{out}\n{err}"
        assert "Traceback" not in out + err
        if watching:  # `watch --once`: the current lines, not JSON
            assert "anna/report-q3" in out and "outcome" in out, out
        else:
            json.loads(out)  # one JSON value


async def test_a_model_the_local_core_does_not_offer_is_refused_with_the_list(local_stack: Stack) -> None:
    """Issue 11: the first release's README example (`--model gpt-5`) made a failed helper; now the starter asks
    the local core's catalog and refuses it with exit 2, naming `scripted`, before anything is admitted."""
    command = [sys.executable, "-m", "starter", "start", "--owner", "anna", "--id", "x", "--model", "gpt-5"]
    done = await asyncio.to_thread(
        subprocess.run, [*command, "--task", "Find it"], cwd=ROOT, env=_second_shell(local_stack), capture_output=True
    )
    assert done.returncode == 2, done.stdout
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid_request" and "it offers: scripted" in error["message"]
