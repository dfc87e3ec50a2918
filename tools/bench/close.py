"""The owner closes a running helper: how soon the close is confirmed, the session stopped, the helper ended and
its slot passed on (R7, R21).

    .venv/bin/python -m tools.bench.close [--rounds 30]

Three helpers hold the three slots, each following a session that has made a step, with the deployment's follow
(long polls of 20 s against a core that offers them); one more waits for a slot. Each round closes one running
helper and times, from the call:
(a) the close's answer to the owner (the row closed);
(b) the session stopped in the core (the cancel);
(c) the helper's workflow ended (its outcome written and every activity it started ended or given up);
(d) the waiting helper's session created (the slot passed on).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from contracts.core_api import SessionStatus
from domain.limits import Policy
from domain.requests import HelperRequest
from protocol.names import helper_workflow_id
from tests.fakes.fake_core import FakeCore
from tools.bench.common import BenchStack, bench_stack, describe, poll_until

OWNER = "bench"


async def _ended(stack: BenchStack, helper_id: str) -> bool:
    handle = stack.client.temporal.get_workflow_handle(helper_workflow_id(OWNER, helper_id))
    status = (await handle.describe()).status
    return status is not None and status.name != "RUNNING"


async def measure(rounds: int) -> dict[str, list[float]]:
    core = FakeCore(long_poll="honest")
    async with bench_stack(Policy(max_open=4), core=core) as stack:

        async def admit(helper_id: str) -> None:
            await stack.client.start(HelperRequest(owner=OWNER, helper_id=helper_id, task="Work.", model="scripted"))

        for n in range(3):
            await admit(f"c{n}")
        await poll_until(lambda: core.create_calls >= 3)
        samples: dict[str, list[float]] = {"answered": [], "stopped": [], "ended": [], "slot": []}
        for number in range(3, 3 + rounds):
            await admit(f"c{number}")  # waits: the three slots are held
            calls = core.create_calls
            running = [s for s in core.sessions.values() if not s.status.is_terminal]
            for session in running:
                if not session.steps:
                    session.add_step(2_000, 300, "Looked at the first thing.")
            closing = running[0]
            helper_id = closing.request.helper_id
            await asyncio.sleep(1.0)  # its follow waits in a long poll, as a running helper's does
            started = time.perf_counter()
            await stack.client.close(OWNER, helper_id)
            answered = time.perf_counter()
            stopped = slot = ended = 0.0
            while not (stopped and slot and ended):
                now = time.perf_counter()
                if not stopped and closing.status is SessionStatus.CANCELLED:
                    stopped = now
                if not slot and core.create_calls > calls:
                    slot = now
                if not ended and await _ended(stack, helper_id):
                    ended = now
                if now - started > 300:
                    raise TimeoutError(f"the close of {helper_id} did not settle within 300 s")
                await asyncio.sleep(0.005)
            for name, at in (("answered", answered), ("stopped", stopped), ("ended", ended), ("slot", slot)):
                samples[name].append((at - started) * 1000)
        return samples


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.close")
    parser.add_argument("--rounds", type=int, default=30)
    arguments = parser.parse_args()
    samples = asyncio.run(measure(arguments.rounds))
    print(describe("close -> answered to the owner (row closed)", samples["answered"]))
    print(describe("close -> session stopped in the core", samples["stopped"]))
    print(describe("close -> helper ended (workflow closed)", samples["ended"]))
    print(describe("close -> slot passed on (next session created)", samples["slot"]), flush=True)
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
