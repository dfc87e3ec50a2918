"""Observation latency: from a change in the core (a step completes) to the helper's row showing it (R11, R44).

    .venv/bin/python -m tools.bench.observation_latency [--samples 200]

Runs the dev server, a worker with the default follow tuning and three running helpers on the programmable
core, twice: once with a core that offers long poll (its snapshots carry a version; the follow's reads wait for
a change), once with one that does not (polled every HELPER_POLL_MS=500). Each sample completes one step in one
session at a known moment and waits for the store to show it, as Iva would read it. The seed's Schedule saw
changes up to a minute later.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

from domain.limits import Policy
from domain.requests import HelperRequest
from tools.bench.common import bench_stack, describe, poll_until

TARGET_P99_MS = 200


async def measure(samples: int, long_poll: bool) -> list[float]:
    async with bench_stack(Policy()) as stack:
        # The fake core's sessions carry versions and hold reads ("honest"), or not (None): a polled core.
        stack.core.long_poll = "honest" if long_poll else None
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
    parser = argparse.ArgumentParser(prog="python -m tools.bench.observation_latency")
    parser.add_argument("--samples", type=int, default=200)
    arguments = parser.parse_args()
    pushed = asyncio.run(measure(arguments.samples, long_poll=True))
    polled = asyncio.run(measure(arguments.samples, long_poll=False))
    print(describe("core step completed -> row shows it (long poll)", pushed), flush=True)
    print(describe("core step completed -> row shows it (polled every 500 ms)", polled), flush=True)
    project, baseline = _p99(pushed), _p99(polled)
    print(
        f"observation p99: project (long poll) {project:.0f} ms | baseline (polling) {baseline:.0f} ms | "
        f"ratio x{project / baseline:.2f}  (target <= {TARGET_P99_MS} ms)",
        flush=True,
    )
    os._exit(0)  # sdk-python#300


def _p99(samples_ms: list[float]) -> float:
    ordered = sorted(samples_ms)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


if __name__ == "__main__":
    main()
