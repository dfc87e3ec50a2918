"""Observation latency: from a change in the core (a step completes) to the helper's row showing it (R11).

    .venv/bin/python -m bench.observation_latency [--samples 200]

Runs the dev server, a worker with the default follow tuning (HELPER_POLL_MS=500) and three running helpers
on the programmable core; each sample completes one step in one session at a known moment and waits for the
store to show it, as Iva would read it. The seed's Schedule saw changes up to a minute later.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

from bench.common import bench_stack, describe, poll_until
from domain.limits import Policy
from domain.requests import HelperRequest


async def measure(samples: int) -> list[float]:
    async with bench_stack(Policy()) as stack:
        helpers = ["h1", "h2", "h3"]
        for helper_id in helpers:
            await stack.client.start(
                HelperRequest(owner="bench", helper_id=helper_id, task="Observe.", model="scripted")
            )
        await poll_until(lambda: len(stack.core.sessions) >= len(helpers))
        sessions = {s.request.helper_id: s for s in stack.core.sessions.values()}
        latencies: list[float] = []
        for _ in range(samples):
            helper_id = random.choice(helpers)
            session = sessions[helper_id]
            await asyncio.sleep(random.uniform(0.05, 0.3))  # changes arrive at arbitrary moments
            changed_at = time.perf_counter()
            session.add_step(1_000 + len(session.steps), 100)
            expected = len(session.steps)
            while True:
                row = await stack.store.get("bench", helper_id)
                if row is not None and row.steps >= expected:
                    latencies.append((time.perf_counter() - changed_at) * 1000)
                    break
                await asyncio.sleep(0.002)
        return latencies


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.observation_latency")
    parser.add_argument("--samples", type=int, default=200)
    arguments = parser.parse_args()
    latencies = asyncio.run(measure(arguments.samples))
    print(describe("core step completed -> row shows it (poll 500 ms)", latencies), flush=True)
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
