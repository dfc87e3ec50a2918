"""The local stack as a newcomer uses it: `python -m tools.demo run` (what `make run` runs) stopped every way a person
stops it, restarted on its data, and reached from a second shell with the README's own commands.

Each test runs the real command as its own process tree on six free ports, and checks what a person would:
that no process and no port is left, that rows survive a restart, that pasted commands exit as documented.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.local_run import (
    KEEPS_RUNNING,
    ROOT,
    UP,
    Running,
    clean_env,
    demo_pid,
    start_run,
    stopped_cleanly,
)

pytestmark = pytest.mark.e2e


def test_ctrl_c_through_a_pipe_leaves_nothing_and_a_restart_keeps_the_rows(tmp_path: Path, cleanup: list[Running]):
    """`make run | tee run.log` then Ctrl-C (SIGINT to the whole job; tee dies, the demo's stdout
    breaks) stops every process and frees every port. `make run` again on the same data resumes: the rows of
    the first run are still there and the second shell's starter lists them."""
    first = start_run(tmp_path, through_pipe=True)
    cleanup.append(first)
    first.wait_for(KEEPS_RUNNING, timeout=240)
    os.killpg(first.process.pid, signal.SIGINT)
    assert stopped_cleanly(first) == []
    assert "Traceback" not in first.output()

    second = start_run(tmp_path, through_pipe=False, data=first.data, base=first.base)
    cleanup.append(second)
    second.wait_for(KEEPS_RUNNING, timeout=120)
    assert "Resumed the stack of an earlier run" in second.output()
    listed = subprocess.run(
        [sys.executable, "-m", "starter", "list", "--owner", "anna"],
        cwd=ROOT,
        env={**clean_env(), "HELPER_ENV_FILE": str(first.data / "local.env")},
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
    assert stopped_cleanly(second) == []


@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "SIGKILL"])
def test_every_other_way_of_stopping_leaves_nothing(tmp_path: Path, cleanup: list[Running], how: str):
    """SIGTERM (a supervisor), SIGHUP (the terminal closed) and even SIGKILL of the demo process stop
    every part of the stack: no process, no port left (on Linux the children die with their parent)."""
    running = start_run(tmp_path, through_pipe=False)
    cleanup.append(running)
    running.wait_for(UP, timeout=120)
    os.kill(demo_pid(running), getattr(signal, how))
    assert stopped_cleanly(running) == []


def test_a_second_make_run_refuses_without_touching_the_live_data(tmp_path: Path, cleanup: list[Running]):
    """Starting a second stack on ports in use says which process holds them and deletes nothing."""
    running = start_run(tmp_path, through_pipe=False)
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
    assert stopped_cleanly(running) == []


def _durable_files(data: Path) -> set[str]:
    """The data folder's files, without SQLite's transient journal files, which come and go as the stack runs."""
    return {path.name for path in data.iterdir() if not path.name.endswith(("-journal", "-wal", "-shm"))}
