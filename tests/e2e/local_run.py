"""`python -m tools.demo run` (what `make run` runs) as its own process tree on six free ports, for tests that use the
local stack as a person does: its output as the terminal shows it, and what it leaves behind once stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import free_port_run, listenable

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


def start_run(
    tmp_path: Path, *, through_pipe: bool, data: Path | None = None, base: int | None = None, workers: int = 1
) -> Running:
    """`make run` (through a pipe) or `python -m tools.demo run` as a terminal job: its own process group, like the
    shell's foreground job."""
    data = data or tmp_path / "data"
    base = base or free_port_run(6)
    log = tmp_path / f"run-{time.monotonic_ns()}.log"
    command = f"{sys.executable} -m tools.demo run --data {data} --port-base {base} --workers {workers}"
    if through_pipe:
        # `make run | tee run.log`, as a person types it: Ctrl-C reaches make and tee too; tee dies first and
        # breaks the demo's stdout. (make's set-up step finds the environment installed and does nothing.)
        shell = ["bash", "-c", f"make -s run DATA={data} PORT_BASE={base} WORKERS={workers} 2>&1 | tee {log}"]
        process = subprocess.Popen(shell, cwd=ROOT, stdout=subprocess.DEVNULL, start_new_session=True)
    else:
        with log.open("wb") as out:
            process = subprocess.Popen(
                command.split(), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
    return Running(process, data, log, base)


def demo_pid(running: Running) -> int:
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


def stopped_cleanly(running: Running, timeout: float = 60) -> list[str]:
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


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))}
