"""`python -m demo run` (keeps the stack up until Ctrl-C) and `python -m demo demo` (exits with a verdict)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from demo.scenario import run_scenario
from demo.stack import Ports, Stack, StackError


async def main_async(mode: str, data: Path, ports: Ports) -> int:
    stack = Stack(data=data, ports=ports)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        print(f"Starting the stack in {data}/ (logs in {stack.logs}/) ...", flush=True)
        await stack.start(fresh=True)
        print(f"Temporal Web UI: {stack.ui_url}  (every helper's history is there)", flush=True)
        print(f"Payloads are encrypted; the UI decodes them through the codec server at {stack.codec_url}", flush=True)
        settings = stack.settings()
        print(
            f"Temporal {settings.temporal_address} · core {settings.core_url} · chat {settings.chat_url}\n", flush=True
        )
        scenario = asyncio.create_task(run_scenario(stack.settings()))
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({scenario, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            scenario.cancel()
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
            print(f"\nThe stack keeps running. Web UI: {stack.ui_url}   Press Ctrl-C to stop.", flush=True)
            await stopper
            return 0
        return 1 if problems else 0
    except StackError as error:
        print(f"\nThe stack did not start: {error}", file=sys.stderr)
        return 2
    except TimeoutError as error:
        print(f"\nDEMO FAILED: {error}", file=sys.stderr)
        return 1
    finally:
        print("Stopping every process the demo started ...", flush=True)
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m demo")
    parser.add_argument("mode", choices=["run", "demo"])
    parser.add_argument("--data", type=Path, default=Path("data"), help="state folder (wiped at start)")
    parser.add_argument("--temporal-port", type=int, default=7233)
    parser.add_argument("--ui-port", type=int, default=8233)
    parser.add_argument("--core-port", type=int, default=8310)
    parser.add_argument("--chat-port", type=int, default=8320)
    parser.add_argument("--codec-port", type=int, default=8330)
    arguments = parser.parse_args()
    ports = Ports(
        arguments.temporal_port, arguments.ui_port, arguments.core_port, arguments.chat_port, arguments.codec_port
    )
    code = asyncio.run(main_async(arguments.mode, arguments.data.resolve(), ports))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
