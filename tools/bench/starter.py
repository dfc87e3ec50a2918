"""How long one `helper-starter` call takes, as Iva makes it: one process per call, on every chat turn (R43).

    .venv/bin/python -m tools.bench.starter [--runs 20] [--no-write] [--postgres URL] [--bytecode cached|as-set]

Fills a fresh SQLite store (and, with --postgres, a fresh database on that server) with one owner's 20 rows, then
runs each command `--runs` times as `python -m starter ...`, each run next to a run of `python -c pass` (the
baseline: a bare interpreter's start on this machine, at this moment), and prints p50 / p99 of both and their
ratio. The write is `close` of an unknown helper against a Temporal dev server started here (no worker needed: the
owner has no coordinator, so the answer is `unknown_helper`, exit 1) and shows what a write's imports and its
Temporal connection cost; so is `delivered` for an owner with no coordinator (exit 0). `import temporalio.client`
is printed as the floor of any write.

Bytecode: an installed starter runs from compiled bytecode. Where PYTHONDONTWRITEBYTECODE is set (as in some
sandboxes), every call would compile the project's modules again, so by default (`--bytecode cached`) the
measured processes keep their bytecode in a temporary PYTHONPYCACHEPREFIX (the checkout is not touched) after a
first warm-up run; `--bytecode as-set` measures with the environment as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from domain.limits import Limits
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from store.helper_store import HelperStore
from tools.bench.common import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
READ_TARGET = 10
WRITE_TARGET = 20
OWNER = "anna"


@dataclass(frozen=True)
class Command:
    name: str
    argv: list[str]  # after `python`
    exit_code: int
    target: int
    env: dict[str, str]


def _percentiles(samples_ms: list[float]) -> tuple[float, float]:
    ordered = sorted(samples_ms)
    return ordered[round(0.50 * (len(ordered) - 1))], ordered[round(0.99 * (len(ordered) - 1))]


def _elapsed_ms(argv: list[str], env: dict[str, str], exit_code: int) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != exit_code:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stdout.decode()[-500:]}")
    return elapsed


def measure(command: Command, runs: int, base_env: dict[str, str]) -> str:
    """`runs` runs of the command, each beside a baseline run, in alternating order so drift hits both alike."""
    project: list[float] = []
    baseline: list[float] = []
    for number in range(runs):
        pair = [("project", command.argv, command.env, command.exit_code), ("baseline", ["-c", "pass"], base_env, 0)]
        for kind, argv, env, code in pair if number % 2 == 0 else reversed(pair):
            (project if kind == "project" else baseline).append(_elapsed_ms(argv, env, code))
    p50, p99 = _percentiles(project)
    b50, b99 = _percentiles(baseline)
    return (
        f"{command.name}: project p50={p50:.0f} ms p99={p99:.0f} ms | baseline p50={b50:.0f} ms p99={b99:.0f} ms"
        f" | ratio ×{p50 / b50:.1f} / ×{p99 / b99:.1f}  (target ≤ ×{command.target})"
    )


async def _fill(url: str, results: Path) -> None:
    """One owner's 20 rows in every state, a few with an outcome, as the store holds them mid-day."""
    store = await HelperStore.connect(url, run_migrations=True)
    try:
        states = list(RowState)
        for number in range(1, 21):
            state = states[number % len(states)]
            moment = datetime(2026, 11, 30, 9, number, tzinfo=UTC)
            row = HelperRow(
                owner=OWNER,
                helper_id=f"h{number:02d}",
                seq=number,
                state=state,
                task="Find the Q3 report and mail it to Bob",
                boundary=["send_mail to bob@example.com"],
                language="en",
                model="scripted",
                limits=Limits(),
                result_dir=str(results / OWNER / f"h{number:02d}.{number}"),
                admitted_at=moment,
                generation=1,
                updated_at=moment,
                outcome_kind=OutcomeKind.COMPLETED if state in (RowState.UNREPORTED, RowState.DELIVERED) else None,
                summary="Mailed the Q3 report to Bob." if state is RowState.UNREPORTED else None,
            )
            await store.insert_admitted(row)
    finally:
        await store.close()


@contextlib.contextmanager
def dev_server() -> Iterator[str]:
    """A Temporal dev server in memory on a free loopback port; its address once it takes connections."""
    port = free_port()
    quiet = ["--log-level", "error"]
    server = subprocess.Popen(
        [BIN / "temporal", "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port), *quiet],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the Temporal dev server did not start")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _reads(env: dict[str, str], label: str = "") -> list[Command]:
    suffix = f" ({label})" if label else ""
    return [
        Command(f"list{suffix}", ["-m", "starter", "list", "--owner", OWNER], 0, READ_TARGET, env),
        Command(f"unreported{suffix}", ["-m", "starter", "unreported", "--owner", OWNER], 0, READ_TARGET, env),
        Command(f"show{suffix}", ["-m", "starter", "show", "--owner", OWNER, "--id", "h03"], 0, READ_TARGET, env),
        Command(f"usage{suffix}", ["-m", "starter", "usage", "--owner", OWNER], 0, READ_TARGET, env),
    ]


def run(runs: int, write: bool, postgres: str | None, bytecode: str) -> None:
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))}
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as scope:
        if bytecode == "cached":
            base_env.pop("PYTHONDONTWRITEBYTECODE", None)
            base_env["PYTHONPYCACHEPREFIX"] = str(Path(scratch) / "pycache")
        results = Path(scratch) / "results"
        url = f"sqlite+aiosqlite:///{Path(scratch) / 'helpers.sqlite3'}"
        asyncio.run(_fill(url, results))
        env = {**base_env, "HELPER_STORE_URL": url, "HELPER_RESULTS_DIR": str(results)}
        commands = _reads(env)
        if postgres:
            from tests.helpers import fresh_postgres_database

            database = scope.enter_context(_sync_context(fresh_postgres_database(postgres)))
            asyncio.run(_fill(database, results))
            commands += _reads({**env, "HELPER_STORE_URL": database}, "postgresql")
        commands.append(
            Command("floor of a write: import temporalio.client", ["-c", "import temporalio.client"], 0, 20, base_env)
        )
        if write:
            address = scope.enter_context(dev_server())
            write_env = {**env, "TEMPORAL_ADDRESS": address}
            close = ["-m", "starter", "close", "--owner", OWNER, "--id", "h01"]
            commands.append(Command("close (write, Temporal up)", close, 1, WRITE_TARGET, write_env))
            delivered = ["-m", "starter", "delivered", "--owner", OWNER, "--turn", "t-1", "--answer-chars", "10"]
            commands.append(Command("delivered (write, Temporal up)", delivered, 0, WRITE_TARGET, write_env))
        print(
            f"{runs} runs each, every run beside a `python -c pass` run; bytecode {bytecode}"
            f" (PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', 'unset')} here)",
            flush=True,
        )
        for command in commands:
            _elapsed_ms(command.argv, command.env, command.exit_code)  # warm-up: bytecode, the OS's file cache
            print(measure(command, runs, base_env), flush=True)


@contextlib.contextmanager
def _sync_context(manager: contextlib.AbstractAsyncContextManager[str]) -> Iterator[str]:
    """An async context manager held open across the synchronous measurements, on a loop of its own."""
    loop = asyncio.new_event_loop()
    try:
        yield loop.run_until_complete(manager.__aenter__())
    finally:
        loop.run_until_complete(manager.__aexit__(None, None, None))
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--no-write", dest="write", action="store_false", help="skip the writes (no dev server)")
    parser.add_argument("--bytecode", choices=["cached", "as-set"], default="cached")
    parser.add_argument(
        "--postgres", help="also read from PostgreSQL, e.g. postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
    )
    arguments = parser.parse_args()
    run(arguments.runs, arguments.write, arguments.postgres, arguments.bytecode)


if __name__ == "__main__":
    main()
