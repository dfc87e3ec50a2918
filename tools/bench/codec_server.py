"""The codec server under large bodies: memory, decode time, and whether the probes stay answered.

    .venv/bin/python -m tools.bench.codec_server [--mib 4]

Runs `python -m codec serve` as its own process on loopback (with a static token), then
(a) sends a body just under the cap made of encrypted payloads and times the decode,
(b) meanwhile asks /livez every 20 ms and reports the slowest answer (decoding runs off the event loop),
(c) sends 20 MiB and 200 MiB bodies, which must be refused with 413 at once,
and prints the server's peak resident memory (VmHWM) after all of it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from codec.encryption import codec_from, new_key
from tools.bench.common import free_port

TOKEN = "bench-token"


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _body_near(keys: str, target_bytes: int) -> bytes:
    codec = codec_from(keys, None)
    assert codec is not None
    chunk = base64.b64encode(os.urandom(48 * 1024)).decode()  # 64 KiB of text per payload
    payload = Payload(metadata={"encoding": b"json/plain"}, data=f'"{chunk}"'.encode())
    count = max(1, int(target_bytes / (len(chunk) * 4 / 3 + 200)))
    encoded = await codec.encode([payload] * count)
    return json_format.MessageToJson(Payloads(payloads=encoded)).encode()


async def run(mib: float) -> None:
    keys = f"k1:{new_key()}"
    port = free_port()
    env = {**os.environ, "HELPER_CODEC_KEYS": keys, "HELPER_CODEC_TOKEN": TOKEN}
    server = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "codec", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Namespace": "default"}
    try:
        async with httpx.AsyncClient(timeout=120) as client:
            for _ in range(100):
                try:
                    if (await client.get(f"{base}/livez")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            idle_mib = _peak_rss_mib(server.pid)
            body = await _body_near(keys, int(mib * 1024 * 1024 * 0.95))
            probe_times: list[float] = []
            decoding = True

            async def probe() -> None:
                while decoding:
                    started = time.perf_counter()
                    await client.get(f"{base}/livez")
                    probe_times.append(time.perf_counter() - started)
                    await asyncio.sleep(0.02)

            prober = asyncio.create_task(probe())
            started = time.perf_counter()
            answer = await client.post(f"{base}/decode", content=body, headers=headers)
            decode_s = time.perf_counter() - started
            decoding = False
            await prober
            refused = {}
            for size_mib in (20, 200):
                started = time.perf_counter()
                big = await client.post(f"{base}/decode", content=b"x" * (size_mib * 1024 * 1024), headers=headers)
                refused[size_mib] = (big.status_code, time.perf_counter() - started)
            peak_mib = _peak_rss_mib(server.pid)
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), timeout=10)
    print(f"codec server ({os.cpu_count()} cores): idle peak RSS {idle_mib:.0f} MiB")
    print(
        f"decode of a {len(body) / 1024 / 1024:.1f} MiB body: HTTP {answer.status_code} in {decode_s * 1000:.0f} ms; "
        f"/livez meanwhile answered {len(probe_times)} times, slowest {max(probe_times, default=0) * 1000:.0f} ms"
    )
    for size_mib, (status, seconds) in refused.items():
        print(f"{size_mib} MiB body: HTTP {status} in {seconds * 1000:.0f} ms (client-side, including the upload)")
    print(f"peak RSS after all requests: {peak_mib:.0f} MiB (the Deployment's limit is 192 MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=float, default=4.0, help="the body size to decode, just under the cap")
    asyncio.run(run(parser.parse_args().mib))


if __name__ == "__main__":
    main()
