"""Thousands of long polls held at once through the worker's HTTP client (R44, R46).

    .venv/bin/python -m tools.bench.http_pool [--polls 500,1000,2000]

A local uvicorn server (its own process, on loopback) holds every `GET /poll` until it is told to release them all.
For each count N and each client, a fresh process opens N polls, waits until the server holds all N, then has
them released and reads the answers; twice, and the second round (connections kept alive, as a follow's next poll
finds its connection) is the one measured:

- CPU per call: the client process's CPU time for the round, over N;
- RSS per held poll: the client process's resident memory while the N polls are held, less its memory before it
  made the client, over N;
- p99 latency: from the release to each answer read by the client.

The clients: the project's (`clients.http.peer_client` sized to N slots, as the worker sizes it) and, as the
baseline, raw asyncio streams speaking HTTP/1.1 by hand (the floor of a long poll's cost in Python). `--layouts
one_pool` adds a bare httpx client with one pool of N connections (httpx's default layout, sized to N). Every wait has a
bound: a run that misses one fails instead of hanging.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

HOST = "127.0.0.1"
HOLD_MAX_S = 60.0  # the server answers a poll after this even if never released
WAIT_S = 60.0  # the client's bound on every wait: all held, all answered
# A snapshot's size: the answer a follow's long poll reads.
ANSWER = json.dumps({"session_id": "s-1", "status": "running", "steps": [], "version": 2, "last_message": "x" * 200})


# --- the server ------------------------------------------------------------------------------------------

_held = 0
_release = asyncio.Event()


async def app(
    scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
) -> None:
    """GET /poll is held until POST /release; GET /held says how many are held."""
    global _held, _release
    if scope["type"] != "http":
        return
    body = b""
    if scope["path"] == "/poll":
        _held += 1
        released = _release
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(released.wait(), HOLD_MAX_S)
        _held -= 1
        body = ANSWER.encode()
    elif scope["path"] == "/release":
        _release.set()
        _release = asyncio.Event()
    elif scope["path"] == "/held":
        body = str(_held).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextlib.contextmanager
def serving() -> Any:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "uvicorn", "tools.bench.http_pool:app", "--host", HOST, "--port", str(port)]
    command += ["--log-level", "warning", "--no-access-log", "--backlog", "4096", "--lifespan", "off"]
    server = subprocess.Popen(command)
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _get(url + "/held")
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the bench server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        server.wait(10)


def _get(url: str, method: str = "GET") -> str:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as answer:
        return str(answer.read().decode())


# --- the clients -----------------------------------------------------------------------------------------

Poll = Callable[[], Awaitable[None]]


@contextlib.asynccontextmanager
async def project(url: str, polls: int) -> AsyncIterator[Poll]:
    from clients.http import peer_client

    async with peer_client(connections=polls, proxy=None) as client:

        async def poll() -> None:
            response = await client.get(url + "/poll")
            assert response.status_code == 200 and len(response.content) == len(ANSWER)

        yield poll


@contextlib.asynccontextmanager
async def one_pool(url: str, polls: int) -> AsyncIterator[Poll]:
    """The project's settings in a single pool of `polls` connections."""
    import httpx

    limits = httpx.Limits(max_connections=polls, max_keepalive_connections=polls, keepalive_expiry=4.0)
    async with httpx.AsyncClient(limits=limits, timeout=None, trust_env=False) as client:

        async def poll() -> None:
            response = await client.get(url + "/poll")
            assert response.status_code == 200 and len(response.content) == len(ANSWER)

        yield poll


@contextlib.asynccontextmanager
async def streams(url: str, polls: int) -> AsyncIterator[Poll]:
    """HTTP/1.1 over asyncio streams, one kept-alive connection per poll: no client library at all."""
    port = int(url.rsplit(":", 1)[1])
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    request = f"GET /poll HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode()

    async def poll() -> None:
        reader, writer = idle.pop() if idle else await asyncio.open_connection(HOST, port)
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        assert head.startswith(b"HTTP/1.1 200") and len(await reader.readexactly(length)) == len(ANSWER)
        idle.append((reader, writer))

    try:
        yield poll
    finally:
        for _, writer in idle:
            writer.close()


LAYOUTS: dict[str, Callable[[str, int], contextlib.AbstractAsyncContextManager[Poll]]] = {
    "project": project,
    "streams": streams,
    "one_pool": lambda url, polls: one_pool(url, polls),
}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


async def _round(url: str, poll: Poll, polls: int) -> tuple[float, list[float], int]:
    """CPU seconds of the round, the latencies (s) of the answers after the release, RSS while all are held."""
    answered: list[float] = []

    async def timed() -> None:
        await poll()
        answered.append(time.perf_counter())

    cpu = time.process_time()
    tasks = [asyncio.create_task(timed()) for _ in range(polls)]
    async with asyncio.timeout(WAIT_S):
        while int(await asyncio.to_thread(_get, url + "/held")) < polls:  # noqa: ASYNC110 (the count is in another process)
            await asyncio.sleep(0.05)
        rss = _rss_bytes()
        released = time.perf_counter()
        await asyncio.to_thread(_get, url + "/release", "POST")
        await asyncio.gather(*tasks)
    return time.process_time() - cpu, [at - released for at in answered], rss


async def measure(layout: str, url: str, polls: int) -> dict[str, float]:
    before = _rss_bytes()
    async with LAYOUTS[layout](url, polls) as poll:
        await _round(url, poll, polls)  # opens the connections
        cpu, latencies, rss = await _round(url, poll, polls)
    ordered = sorted(latencies)
    return {
        "cpu_ms": cpu * 1000 / polls,
        "rss_kb": (rss - before) / 1024 / polls,
        "p99_ms": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000,
    }


def _child(layout: str, url: str, polls: int) -> dict[str, float]:
    """One measurement in a fresh process, so memory and CPU are this client's alone."""
    command = [sys.executable, "-m", "tools.bench.http_pool", "--child", layout, "--url", url, "--polls", str(polls)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_S * 3, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{layout} with {polls} polls failed:\n{done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.http_pool")
    parser.add_argument("--polls", default="500,1000,2000", help="comma-separated counts of polls held at once")
    parser.add_argument("--layouts", default="", help="more clients beside the project's: " + ", ".join(LAYOUTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        print(json.dumps(asyncio.run(measure(arguments.child, arguments.url, int(arguments.polls)))), flush=True)
        return
    counts = [int(count) for count in arguments.polls.split(",")]
    extra = [name for name in arguments.layouts.split(",") if name and name not in ("project", "streams")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * max(counts) + 100:  # the server and each client hold a socket per poll; children inherit it
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * max(counts) + 1000), hard))
    with serving() as url:
        for polls in counts:
            figures = {layout: _child(layout, url, polls) for layout in ["project", "streams", *extra]}
            for layout, got in figures.items():
                print(
                    f"{layout:>8}, {polls} polls: CPU {got['cpu_ms']:.3f} ms per call, "
                    f"RSS {got['rss_kb']:.1f} KiB per held poll, p99 {got['p99_ms']:.0f} ms after the release",
                    flush=True,
                )
            ours, floor = figures["project"], figures["streams"]
            print(
                f"http pool, {polls} long polls, CPU per call: project {ours['cpu_ms']:.3f} ms | "
                f"baseline (asyncio streams) {floor['cpu_ms']:.3f} ms | ratio x{ours['cpu_ms'] / floor['cpu_ms']:.1f}; "
                f"p99 after release: project {ours['p99_ms']:.0f} ms | baseline {floor['p99_ms']:.0f} ms",
                flush=True,
            )
    os._exit(0)


if __name__ == "__main__":
    main()
