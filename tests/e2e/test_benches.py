"""Every bench still runs end to end (`python -m tools.bench --smoke`): a bench that no longer starts its stack, reads
what the code no longer offers, or stops printing its comparison would otherwise be found only by the next
`make bench`. The figures of a smoke run are a few samples each and are not looked at: speed
belongs to the benches themselves (docs/performance.md), not to tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_URL
from tools.bench.__main__ import BENCHES, Bench

ROOT = Path(__file__).resolve().parents[2]
SMOKE_LIMIT_S = 300  # the slowest, `actions`, runs a one-minute helper: about 50 s
# Benches that print no "project … | baseline …" line: their figures stand alone.
NOTHING_TO_COMPARE = {"one_owner", "handoff", "close", "codec_server"}
ON_POSTGRES = {"reads", "capacity", "burst", "fairness", "failover"}


def _marked(bench: Bench) -> object:
    return pytest.param(bench, id=bench.name, marks=[pytest.mark.postgres] if bench.name in ON_POSTGRES else [])


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("bench", [_marked(bench) for bench in BENCHES])
def test_each_bench_runs_to_its_figures(bench: Bench) -> None:
    """`python -m tools.bench --smoke --only NAME` exits 0, and its table holds the bench's comparison lines."""
    environment = {**os.environ, "HELPER_BENCH_POSTGRES": POSTGRES_URL}
    finished = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--smoke", "--only", bench.name],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=SMOKE_LIMIT_S,
    )
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, f"{bench.name} exited {finished.returncode}:\n{output[-4000:]}"
    table = output.rpartition("== project | baseline | ratio, from this run")[2]
    assert table, f"{bench.name} printed no table:\n{output[-4000:]}"
    if bench.name in NOTHING_TO_COMPARE:
        assert f"{bench.name}: (no comparison line)" in table
    else:
        assert "| baseline" in table or "| target" in table, f"{bench.name}'s table is empty:\n{table}"
