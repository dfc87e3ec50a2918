"""The README's "Using it" commands, pasted as written into a second shell against a running local stack.

The stack is the one `make run` starts (`tools.demo.stack.Stack`: dev server, worker, reference core and chat, codec
server), on free ports with its own data folder; the shell finds its settings through HELPER_ENV_FILE, as the
README says for a stack outside the checkout. Each command runs in its own `bash -c` from the checkout and must
exit as the README documents: every one 0, `watch --id` once the helper has its outcome. The README's calls of the
starter API ("Over HTTP") run as one shell script against the stack's service (R47).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers import free_port_run
from tools.demo.stack import Ports, Stack

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_commands(block_index: int = 0) -> list[str]:
    """The commands of a shell block under "## Using it" (the first: the console script's; the second: the
    starter API's; the third: a slow helper for the replicas), continuation lines joined."""
    section = README.read_text().split("## Using it", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) > block_index, "the README's 'Using it' section lacks a sh block"
    commands: list[str] = []
    pending = ""
    for line in blocks[block_index].splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        commands.append(pending + line)
        pending = ""
    return [command for command in commands if command.strip() and not command.lstrip().startswith("#")]


def _in_this_environment(command: str) -> str:
    """The command as pasted; run outside `make`'s virtual environment, with this interpreter's scripts."""
    if (ROOT / ".venv" / "bin" / "helper-starter").exists():
        return command
    return command.replace(".venv/bin/", f"{Path(sys.executable).parent}/")


@pytest.fixture
async def local_stack(tmp_path: Path) -> AsyncIterator[Stack]:
    base = free_port_run(6)
    stack = Stack(tmp_path / "data", Ports(*range(base, base + 6)))
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
    """`watch --id` prints the helper's lines and ends by itself once it has its outcome."""
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, timeout=timeout)
    return done.returncode, done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")


async def test_every_readme_command_works_from_a_second_shell(local_stack: Stack) -> None:
    """The README's commands, pasted as written into a second shell while the stack runs, each exit 0
    with one JSON answer (watch prints live lines, until Ctrl-C or at once with --once); none prints a
    traceback."""
    commands = readme_commands()
    assert len(commands) >= 10 and all(c.startswith(".venv/bin/helper-starter ") for c in commands), commands
    commands = [_in_this_environment(command) for command in commands]
    env = _second_shell(local_stack)
    for command in commands:
        watching = " watch " in command
        if watching and "--once" not in command:
            code, lines = await asyncio.to_thread(_watch_until_outcome, command, env)
            assert code == 0, lines
            assert "report-q3" in lines and "outcome" in lines.splitlines()[-1], lines
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

    # The replica paragraph's slow helper: admitted and running, a 60-step script the reference core accepts.
    (slow,) = [_in_this_environment(command) for command in readme_commands(2)]
    done = await asyncio.to_thread(
        subprocess.run, ["bash", "-c", slow], cwd=ROOT, env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert json.loads(done.stdout)["status"] == "running"


async def test_a_model_the_local_core_does_not_offer_is_refused_with_the_list(local_stack: Stack) -> None:
    """The README's old example (`--model gpt-5`) made a failed helper; now the starter asks
    the local core's catalog and refuses it with exit 2, naming `scripted`, before anything is admitted."""
    command = [sys.executable, "-m", "starter", "start", "--owner", "anna", "--id", "x", "--model", "gpt-5"]
    done = await asyncio.to_thread(
        subprocess.run, [*command, "--task", "Find it"], cwd=ROOT, env=_second_shell(local_stack), capture_output=True
    )
    assert done.returncode == 2, done.stdout
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid_request" and "it offers: scripted" in error["message"]


async def test_the_readme_calls_of_the_starter_api_work(local_stack: Stack) -> None:
    """The "Over HTTP" block, pasted as one script: every call answers JSON (the watch: events ending with the
    outcome), none an error."""
    commands = readme_commands(1)
    assert commands[0].startswith("API=http://127.0.0.1:8340/"), commands[0]
    commands[0] = commands[0].replace(":8340/", f":{local_stack.ports.api}/", 1)
    separator = "=====the next call====="
    script = "set -eu\n" + "".join(f"{command}\necho\necho {separator}\n" for command in commands)
    done = await asyncio.to_thread(subprocess.run, ["bash", "-c", script], cwd=ROOT, capture_output=True, timeout=180)
    assert done.returncode == 0, done.stderr.decode()
    answers = done.stdout.decode().split(separator)[:-1]
    assert len(answers) == len(commands)
    for command, answer in zip(commands[1:], answers[1:], strict=True):
        if "/watch" in command:
            assert answer.strip().splitlines()[-1].startswith('data: {"reason": "outcome"'), answer
            continue
        value = json.loads(answer)
        assert not (isinstance(value, dict) and "error" in value), f"{command}\n{answer}"
