"""`python -m tools.demo run` (keeps the stack up until stopped) and `python -m tools.demo demo` (exits with a verdict).

`run` keeps its data folder across restarts: a restarted stack resumes with its rows, histories and codec key,
and does not start the demo helpers again (`make clean` starts over). `demo` always starts from an empty folder of
its own. Both stop every process they started however they are stopped: Ctrl-C in a terminal or through a pipe,
SIGTERM, SIGHUP (the terminal closed), and, on Linux, even when this process is killed outright.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from config import help as help_text
from config.settings import tree_variables
from starter.client import HelperClient
from tools.demo.scenario import ANNA, BORIS, run_scenario
from tools.demo.stack import Ports, Stack, StackError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _TolerantStream:
    """stdout that survives its reader going away (`make run | tee log` and Ctrl-C kills tee first): a write to a
    broken pipe or a closed terminal is dropped instead of raising, so stopping the stack always completes."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._broken = False

    def write(self, text: str) -> int:
        if not self._broken:
            try:
                self._stream.write(text)
            except OSError:  # BrokenPipeError, or EIO from a terminal that is gone
                self._give_up()
        return len(text)

    def flush(self) -> None:
        if not self._broken:
            try:
                self._stream.flush()
            except OSError:
                self._give_up()

    def _give_up(self) -> None:
        self._broken = True
        # The interpreter flushes stdout once more at exit; point the descriptor at /dev/null so that cannot fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


async def main_async(mode: str, data: Path, ports: Ports, workers: int) -> int:
    stack = Stack(data=data, ports=ports, workers=workers)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    exits: asyncio.Task[None] | None = None
    # `demo` stops everything at its end: what it names is there only while it runs.
    meanwhile = " while the demo runs" if mode == "demo" else ""
    try:
        print(f"Starting the stack in {data}/ (logs in {stack.logs}/) ...", flush=True)
        await stack.start(fresh=mode == "demo")
        exits = asyncio.create_task(stack.report_exits(_say_now))
        settings = stack.settings()
        print(f"Temporal Web UI: {stack.ui_url}  (every helper's history is there{meanwhile})", flush=True)
        print(f"Payloads are encrypted; the UI decodes them through the codec server at {stack.codec_url}", flush=True)
        print(f"Temporal {settings.temporal_address} · core {settings.core_url} · chat {settings.chat_url}", flush=True)
        print(f"Starter API (what Iva calls over HTTP, docs/api.md): {stack.api_url}/v1/owners/<owner>/…", flush=True)
        print(f"Settings for the starter in another shell{meanwhile}: {stack.env_file_hint(Path.cwd())}", flush=True)
        _show_workers(stack)
        if mode == "run" and stack.resumed:
            await _show_resumed(stack)
            return await _until_stopped(stack, stop)
        scenario = asyncio.create_task(run_scenario(settings))
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({scenario, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            scenario.cancel()
            await asyncio.gather(scenario, return_exceptions=True)
            print("\nInterrupted.", flush=True)
            return 130
        problems = scenario.result()
        print()
        if problems:
            print("DEMO FAILED: some helpers did not reach the outcome the scenario expects:")
            for problem in problems:
                print(f"  - {problem}")
        else:
            print("Every demo helper reached the outcome the scenario expects.")
        if mode == "run":
            return await _until_stopped(stack, stop)
        return 1 if problems else 0
    except StackError as error:
        print(f"\nThe stack did not start: {error}", file=sys.stderr)
        return 2
    except TimeoutError as error:
        print(f"\nDEMO FAILED: {error}", file=sys.stderr)
        return 1
    finally:
        if exits is not None:
            exits.cancel()
        print("Stopping every process the demo started ...", flush=True)
        stack.stop()
        print("Stopped.", flush=True)


def _say_now(line: str) -> None:
    print(f"{datetime.now():%H:%M:%S}  {line}", flush=True)


def _show_workers(stack: Stack) -> None:
    if stack.workers == 1:
        print(f"Worker: pid {stack.pid('worker')}, log {stack.logs / 'worker.log'}\n", flush=True)
        return
    print(f"{stack.workers} worker replicas on the same task queues:", flush=True)
    for name in stack.worker_names:
        print(f"  {name}: pid {stack.pid(name)}, log {stack.logs / name}.log", flush=True)
    print(
        "Stop one (`kill <pid>`, as Kubernetes stops a pod): this terminal says so, and the helpers it followed go on"
        " in the others: their logs say `following <owner>/<helper>`, and the Web UI shows each follow attempt's"
        " worker.\n",
        flush=True,
    )


async def _until_stopped(stack: Stack, stop: asyncio.Event) -> int:
    print(
        f"\nThe stack keeps running. Web UI: {stack.ui_url}   Start your own helpers from another shell (README,"
        " 'Using it'). Press Ctrl-C to stop; `make run` again resumes with the same data, `make clean` starts over.",
        flush=True,
    )
    await stop.wait()
    return 0


async def _show_resumed(stack: Stack) -> None:
    """A restarted stack keeps what it had: say so, with the rows the store still holds."""
    client = await HelperClient.connect(stack.settings(), temporal=False)
    try:
        counts = {owner: len(await client.list_helpers(owner)) for owner in (ANNA, BORIS)}
    finally:
        await client.aclose()
    print(resumed_text(counts, stack.data, Path.cwd()), flush=True)


def resumed_text(counts: dict[str, int], data: Path, cwd: Path) -> str:
    """What a restart on a kept data folder says: what it kept, that the demo helpers are not started again, and
    how to see them again (`make clean` forgets only the checkout's own data/)."""
    rows = ", ".join(f"{owner} {count}" for owner, count in counts.items())
    own = data.resolve() == (cwd / "data").resolve()
    start_over = "`make clean` and `make run` again" if own else f"remove {data}/ and start it again"
    return (
        f"Resumed the stack of an earlier run: the store still holds its rows ({rows}), Temporal its histories, and"
        " helpers that were running go on. The demo helpers are not started again: they run only on a fresh data"
        f" folder. To see them again, stop this (Ctrl-C), then {start_over}, or `make demo`, which runs them in a"
        " folder of its own and leaves this one as it is."
    )


EXIT_CODES = (
    (0, "demo: every helper reached the outcome the scenario expects; run: stopped (Ctrl-C, SIGTERM, SIGHUP)"),
    (1, "demo: some helper did not, or the scenario timed out"),
    (2, "the stack did not start (the message says why), or the command line is wrong"),
    (130, "interrupted before the scenario finished"),
)
# The demo's own variables, beside the settings it keeps from the environment.
OWN_VARIABLES = (("PORT_BASE", None), ("WORKERS", 1))


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; --help reads no variable and starts nothing."""
    epilog = "\n\n".join(
        [
            help_text.environment(
                [*OWN_VARIABLES, *tree_variables(only=("codec_keys", "codec_key_id"))],
                notes=[
                    "PORT_BASE and WORKERS are the options' defaults; the codec key is kept from the environment, "
                    "else from the data folder's local.env, else a new one. Every other variable of the "
                    "environment reaches the processes it starts, whose settings the stack sets: the addresses, "
                    "the store and the results in the data folder."
                ],
            ),
            help_text.exit_codes(EXIT_CODES),
        ]
    )
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--data",
        type=Path,
        default=None,
        help="state folder; default data/ for run (kept across restarts), data/demo/ for demo (emptied at start)",
    )
    options.add_argument(
        "--port-base",
        type=int,
        default=os.environ.get("PORT_BASE") or None,  # converted by argparse once parsed: --help never fails on it
        help="use ports N (Temporal), N+1 (Web UI), N+2 (core), N+3 (chat), N+4 (codec server), N+5 (starter API) "
        "instead of the usual 7233, 8233, 8310, 8320, 8330, 8340; also PORT_BASE in the environment",
    )
    options.add_argument(
        "--workers",
        type=int,
        default=os.environ.get("WORKERS") or 1,
        help="worker replicas to run (default 1; also WORKERS in the environment)",
    )
    parser = argparse.ArgumentParser(
        prog="python -m tools.demo",
        description=help_text.paragraph(
            "The whole stack on loopback (Temporal, the reference core and chat, workers, the codec server, the "
            "starter API) with the demo helpers: `make run`, `make demo`."
        ),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    modes = parser.add_subparsers(dest="mode", required=True, metavar="MODE")
    for mode, text in (
        ("run", "start the stack (resumed from its data folder, else with the demo helpers), run until Ctrl-C"),
        ("demo", "the same scenario on an empty folder, then stop everything and give a verdict"),
    ):
        modes.add_parser(
            mode,
            parents=[options],
            help=text,
            description=help_text.paragraph(text[0].upper() + text[1:] + "."),
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    arguments = parser.parse_args(argv)
    if not 1 <= arguments.workers <= 16:
        parser.error(f"--workers {arguments.workers}: run 1 to 16 worker replicas")
    base = arguments.port_base
    if base is not None and not 1024 <= base <= 65_530:
        parser.error(f"--port-base {base}: use a port from 1024 to 65530 (six ports from it are used)")
    return arguments


def main(argv: Sequence[str] | None = None) -> None:
    arguments = parse_arguments(argv)
    base = arguments.port_base
    ports = Ports(base, base + 1, base + 2, base + 3, base + 4, base + 5) if base else Ports()
    data = arguments.data or (Path("data") if arguments.mode == "run" else Path("data") / "demo")
    sys.stdout = _TolerantStream(sys.stdout)
    sys.stderr = _TolerantStream(sys.stderr)
    code = asyncio.run(main_async(arguments.mode, data.resolve(), ports, arguments.workers))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
