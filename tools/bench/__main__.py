"""Every bench in one run, then the figures beside their baselines (`make bench`).

    .venv/bin/python -m tools.bench [--quick | --smoke] [--only NAME,...]

Each bench runs as its own process (they start dev servers and workers of their own) and prints its figures;
the lines that compare the project with a baseline (`project … | baseline … | ratio …`) are gathered at the
end into one table. Nothing here asserts: a bench prints what it measured, on this machine, in this run.
`--quick` runs smaller samples (about 25 minutes in all); the full run takes about an hour, half of it
`capacity`. `--smoke` runs each bench on a few samples, only to show that it still runs end to end
(`tests/e2e/test_benches.py`); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass

POSTGRES_URL = os.environ.get("HELPER_BENCH_POSTGRES", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")


@dataclass(frozen=True)
class Bench:
    name: str
    module: str
    arguments: tuple[str, ...]
    quick_arguments: tuple[str, ...]
    smoke_arguments: tuple[str, ...]  # only to see it run: tests/e2e/test_benches.py
    about: str


BENCHES = (
    Bench(
        "starter",
        "tools.bench.starter",
        (),
        ("--runs", "10"),
        ("--runs", "2"),
        "helper-starter as one process per call (R43)",
    ),
    Bench(
        "admission",
        "tools.bench.admission",
        ("--samples", "200"),
        ("--samples", "50"),
        ("--samples", "5"),
        "HelperClient.start (R43)",
    ),
    Bench(
        "reads",
        "tools.bench.reads",
        ("--sizes", "1000x20,50000x20", "--postgres", POSTGRES_URL),
        ("--sizes", "1000x20", "--postgres", POSTGRES_URL),
        ("--sizes", "20x5", "--samples", "5", "--postgres", POSTGRES_URL),
        "unreported and list among many owners, SQLite and PostgreSQL (R43)",
    ),
    Bench(
        "helper_rate",
        "tools.bench.helper_rate",
        (),
        ("--helpers", "100"),
        ("--helpers", "20", "--parallel", "4"),
        "helpers per second, CPU per helper",
    ),
    Bench(
        "observation",
        "tools.bench.observation_latency",
        ("--samples", "200"),
        ("--samples", "50"),
        ("--samples", "3"),
        "core change to row, long poll and polling (R44)",
    ),
    Bench(
        "actions",
        "tools.bench.actions",
        ("--minutes", "2"),
        ("--minutes", "1", "--paths", "partial,completed"),
        ("--minutes", "1", "--paths", "completed"),
        "billable actions and core reads per helper (R44)",
    ),
    Bench(
        "one_owner",
        "tools.bench.one_owner",
        (),
        ("--helpers", "300"),
        ("--helpers", "20"),
        "one owner, many helpers: history per run",
    ),
    Bench(
        "http_pool",
        "tools.bench.http_pool",
        ("--polls", "500,1000,2000", "--layouts", "one_pool"),
        ("--polls", "500,1000"),
        ("--polls", "20"),
        "thousands of long polls held through the worker's HTTP client (R46)",
    ),
    Bench(
        "handoff",
        "tools.bench.handoff",
        ("--rounds", "100"),
        ("--rounds", "20"),
        ("--rounds", "3"),
        "slot handoff (R8)",
    ),
    Bench(
        "close",
        "tools.bench.close",
        ("--rounds", "30"),
        ("--rounds", "10"),
        ("--rounds", "2"),
        "a running helper closed: answered, stopped, ended, slot passed on (R21)",
    ),
    Bench(
        "capacity",
        "tools.bench.capacity",
        ("--sizes", "250,500,1000,2000", "--window-s", "180", "--postgres", POSTGRES_URL),
        ("--sizes", "150,300,600", "--window-s", "60", "--settle-s", "20", "--postgres", POSTGRES_URL),
        ("--sizes", "6,12", "--window-s", "15", "--settle-s", "3", "--step-s", "3,6", "--postgres", POSTGRES_URL),
        "running helpers held by one worker replica, and each one's cost (R46)",
    ),
    Bench(
        "burst",
        "tools.bench.burst",
        ("--owners", "1000", "--postgres", POSTGRES_URL),
        ("--owners", "300", "--postgres", POSTGRES_URL),
        ("--owners", "10", "--postgres", POSTGRES_URL),
        "new owners starting a helper at the same moment through the starter API, beside raw update-with-start",
    ),
    Bench(
        "fairness",
        "tools.bench.fairness",
        ("--owners", "100", "--flood", "400", "--postgres", POSTGRES_URL),
        ("--owners", "50", "--flood", "200", "--postgres", POSTGRES_URL),
        ("--owners", "5", "--flood", "20", "--postgres", POSTGRES_URL),
        "one owner floods: the others' time to running, task queue fairness off and on",
    ),
    Bench(
        "api",
        "tools.bench.api",
        ("--owners", "50000", "--samples", "300", "--starts", "100", "--clients", "200", "--postgres", POSTGRES_URL),
        ("--owners", "1000", "--samples", "100", "--starts", "30", "--clients", "200", "--postgres", POSTGRES_URL),
        ("--owners", "20", "--samples", "5", "--starts", "3", "--clients", "20"),
        "the starter API: reads, starts and 200 clients at once over HTTP (R47)",
    ),
    Bench(
        "failover",
        "tools.bench.failover",
        ("--helpers", "24", "--postgres", POSTGRES_URL),
        ("--helpers", "12", "--postgres", POSTGRES_URL),
        ("--helpers", "6", "--step-ms", "1000", "--postgres", POSTGRES_URL),
        "a replica lost while it follows helpers: SIGSTOP, SIGTERM and SIGKILL (R46, R57)",
    ),
    Bench("codec_server", "tools.bench.codec_server", (), (), ("--mib", "1"), "the codec server under big bodies"),
)


def run(bench: Bench, size: str) -> tuple[list[str], float, int]:
    """Run one bench (`size`: full, quick or smoke), echoing its output; its comparison lines, its duration and exit
    status."""
    arguments = {"full": bench.arguments, "quick": bench.quick_arguments, "smoke": bench.smoke_arguments}[size]
    command = [sys.executable, "-m", bench.module, *arguments]
    print(f"\n== {bench.name}: {bench.about}\n$ {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    compared = []
    for line in process.stdout:
        print(line, end="", flush=True)
        if "| baseline" in line or "| target" in line:
            compared.append(line.strip())
    return compared, time.monotonic() - started, process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="smaller samples: a few minutes in all")
    sizes.add_argument("--smoke", action="store_true", help="a few samples each: does every bench still run?")
    parser.add_argument("--only", default="", help="comma-separated bench names: " + ", ".join(b.name for b in BENCHES))
    arguments = parser.parse_args()
    chosen = {name.strip() for name in arguments.only.split(",") if name.strip()}
    unknown = chosen - {bench.name for bench in BENCHES}
    if unknown:
        parser.error(f"unknown benches: {', '.join(sorted(unknown))}")
    size = "quick" if arguments.quick else "smoke" if arguments.smoke else "full"
    table: list[str] = []
    failed: list[str] = []
    for bench in BENCHES:
        if chosen and bench.name not in chosen:
            continue
        compared, seconds, status = run(bench, size)
        table += compared or [f"{bench.name}: (no comparison line)"]
        if status != 0:
            failed.append(f"{bench.name} (exit {status})")
        print(f"-- {bench.name}: {seconds:.0f} s", flush=True)
    print("\n== project | baseline | ratio, from this run\n" + "\n".join(table))
    if failed:
        print("benches that did not finish: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
