"""The local stack as a newcomer uses it: `python -m tools.demo run` (what `make run` runs) stopped every way a person
stops it, restarted on its data, and reached from a second shell with the README's own commands.

Each test runs the real command as its own process tree on six free ports, and checks what a person would:
that no process and no port is left, that rows survive a restart, that pasted commands exit as documented.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.helpers import free_port_run, listenable

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
UP = "Temporal Web UI:"
KEEPS_RUNNING = "The stack keeps running."


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    data: Path
    log: Path
    base: int

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert self.process.poll() is None, f"the stack exited early:\n{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"{text!r} not printed within {timeout} s:\n{self.output()[-3000:]}"
            time.sleep(0.2)

    def left_behind(self) -> list[str]:
        """Processes still alive whose command line names this stack's data folder, and ports still held."""
        left = [f"port {port}" for port in range(self.base, self.base + 6) if not listenable(port)]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if str(self.data) in command and int(entry.name) != os.getpid():
                    left.append(f"pid {entry.name}: {command[:160]}")
        return left


def _start(tmp_path: Path, *, through_pipe: bool, data: Path | None = None, base: int | None = None) -> Running:
    """`make run` (through a pipe) or `python -m tools.demo run` as a terminal job: its own process group, like the
    shell's foreground job."""
    data = data or tmp_path / "data"
    base = base or free_port_run(6)
    log = tmp_path / f"run-{time.monotonic_ns()}.log"
    command = f"{sys.executable} -m tools.demo run --data {data} --port-base {base}"
    if through_pipe:
        # `make run | tee run.log`, as a person types it: Ctrl-C reaches make and tee too; tee dies first and
        # breaks the demo's stdout. (make's set-up step finds the environment installed and does nothing.)
        shell = ["bash", "-c", f"make -s run DATA={data} PORT_BASE={base} 2>&1 | tee {log}"]
        process = subprocess.Popen(shell, cwd=ROOT, stdout=subprocess.DEVNULL, start_new_session=True)
    else:
        with log.open("wb") as out:
            process = subprocess.Popen(
                command.split(), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
    return Running(process, data, log, base)


def _demo_pid(running: Running) -> int:
    """The demo's own process (under bash when it runs through a pipe)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"tools.demo" in command and b"run" in command and str(running.data).encode() in command:
                return int(entry.name)
    raise AssertionError("the demo process is not running")


def _stopped_cleanly(running: Running, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while running.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    left: list[str] = []
    while time.monotonic() < deadline:  # the children may take a moment after their parent
        left = running.left_behind()
        if not left:
            break
        time.sleep(0.3)
    if running.process.poll() is None:
        left.append("the demo itself")
    return left


@pytest.fixture
def cleanup() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for running in started:
        for entry in running.left_behind():
            if entry.startswith("pid "):
                pid = int(entry.split()[1].rstrip(":"))
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def test_ctrl_c_through_a_pipe_leaves_nothing_and_a_restart_keeps_the_rows(tmp_path: Path, cleanup: list[Running]):
    """`make run | tee run.log` then Ctrl-C (SIGINT to the whole job; tee dies, the demo's stdout
    breaks) stops every process and frees every port. `make run` again on the same data resumes: the rows of
    the first run are still there and the second shell's starter lists them."""
    first = _start(tmp_path, through_pipe=True)
    cleanup.append(first)
    first.wait_for(KEEPS_RUNNING, timeout=240)
    os.killpg(first.process.pid, signal.SIGINT)
    assert _stopped_cleanly(first) == []
    assert "Traceback" not in first.output()

    second = _start(tmp_path, through_pipe=False, data=first.data, base=first.base)
    cleanup.append(second)
    second.wait_for(KEEPS_RUNNING, timeout=120)
    assert "Resumed the stack of an earlier run" in second.output()
    listed = subprocess.run(
        [sys.executable, "-m", "starter", "list", "--owner", "anna"],
        cwd=ROOT,
        env={**_clean_env(), "HELPER_ENV_FILE": str(first.data / "local.env")},
        capture_output=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert {"mail-report", "pick-venue", "market-scan"} <= {row["helper_id"] for row in json.loads(listed.stdout)}
    # The starter API the run printed answers the same rows (R47).
    assert f"Starter API (what Iva calls over HTTP, docs/api.md): http://127.0.0.1:{first.base + 5}/" in second.output()
    served = httpx.get(f"http://127.0.0.1:{first.base + 5}/v1/owners/anna/helpers", timeout=30)
    assert served.status_code == 200
    assert {row["helper_id"] for row in served.json()} == {row["helper_id"] for row in json.loads(listed.stdout)}
    os.killpg(second.process.pid, signal.SIGINT)
    assert _stopped_cleanly(second) == []


@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "SIGKILL"])
def test_every_other_way_of_stopping_leaves_nothing(tmp_path: Path, cleanup: list[Running], how: str):
    """SIGTERM (a supervisor), SIGHUP (the terminal closed) and even SIGKILL of the demo process stop
    every part of the stack: no process, no port left (on Linux the children die with their parent)."""
    running = _start(tmp_path, through_pipe=False)
    cleanup.append(running)
    running.wait_for(UP, timeout=120)
    os.kill(_demo_pid(running), getattr(signal, how))
    assert _stopped_cleanly(running) == []


def test_a_second_make_run_refuses_without_touching_the_live_data(tmp_path: Path, cleanup: list[Running]):
    """Starting a second stack on ports in use says which process holds them and deletes nothing."""
    running = _start(tmp_path, through_pipe=False)
    cleanup.append(running)
    running.wait_for(UP, timeout=120)
    before = _durable_files(running.data)
    settings = (running.data / "local.env").read_text()
    again = subprocess.run(
        [sys.executable, "-m", "tools.demo", "demo", "--data", str(running.data), "--port-base", str(running.base)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert again.returncode == 2
    message = again.stderr.decode()
    assert re.search(rf"port {running.base} \(temporal\) on 127\.0\.0\.1 is in use by pid \d+", message), message
    assert _durable_files(running.data) >= before, "the live stack's files were deleted"
    assert (running.data / "local.env").read_text() == settings, "the live stack's settings and key were replaced"
    os.killpg(running.process.pid, signal.SIGINT)
    assert _stopped_cleanly(running) == []


def _durable_files(data: Path) -> set[str]:
    """The data folder's files, without SQLite's transient journal files, which come and go as the stack runs."""
    return {path.name for path in data.iterdir() if not path.name.endswith(("-journal", "-wal", "-shm"))}


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))}
