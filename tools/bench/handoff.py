"""Slot handoff: from a running helper's terminal event to the next waiting helper's session (R8).

    .venv/bin/python -m tools.bench.handoff [--rounds 100]

Three helpers hold the three slots and one more waits. Each round ends one running session in the core and
measures (a) until the helper's outcome is in its row (observation and finalization) and (b) from that
finalized row to the core receiving the waiting helper's create: the handoff itself, by signal, no tick.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from contracts.core_api import SessionStatus
from domain.limits import Policy
from domain.requests import HelperRequest
from tools.bench.common import bench_stack, describe, poll_until


async def measure(rounds: int) -> tuple[list[float], list[float], list[float]]:
    async with bench_stack(Policy(max_open=4)) as stack:
        core = stack.core

        async def admit(helper_id: str) -> None:
            await stack.client.start(HelperRequest(owner="bench", helper_id=helper_id, task="Hand.", model="scripted"))

        for n in range(3):
            await admit(f"r{n}")
        await poll_until(lambda: core.create_calls >= 3)
        to_row: list[float] = []
        handoff: list[float] = []
        end_to_end: list[float] = []
        next_id = 3
        for _ in range(rounds):
            await admit(f"r{next_id}")  # waits: the three slots are held
            calls = core.create_calls
            running = next(s for s in core.sessions.values() if not s.status.is_terminal)
            await asyncio.sleep(0.2)
            ended_at = time.perf_counter()
            running.end(SessionStatus.COMPLETED, "done")
            finalized_at = created_at = 0.0
            while not created_at:
                now = time.perf_counter()
                if not finalized_at:
                    row = await stack.store.get("bench", running.request.helper_id)
                    if row is not None and row.outcome_kind is not None:
                        finalized_at = now
                if core.create_calls > calls:
                    created_at = now
                await asyncio.sleep(0.002)
            finalized_at = finalized_at or created_at
            to_row.append((finalized_at - ended_at) * 1000)
            handoff.append((created_at - finalized_at) * 1000)
            end_to_end.append((created_at - ended_at) * 1000)
            next_id += 1
            # Withdraw the outcome so its row can give way: the bench runs more rounds than rows.
            await stack.client.close("bench", running.request.helper_id)
        return to_row, handoff, end_to_end


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.handoff")
    parser.add_argument("--rounds", type=int, default=100)
    arguments = parser.parse_args()
    to_row, handoff, end_to_end = asyncio.run(measure(arguments.rounds))
    print(describe("terminal in the core -> outcome in the row", to_row))
    print(describe("outcome in the row -> next session created (handoff)", handoff))
    print(describe("terminal in the core -> next session created", end_to_end), flush=True)
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
