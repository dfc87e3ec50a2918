"""R47, R48: a connection that stalls while sending its request is closed after HELPER_API_READ_TIMEOUT_MS, so
stalled clients cannot hold the service's connections and descriptors: one that sends nothing or half its headers
is closed within the bound; one whose headers arrived but half its body is answered 408 `request_timeout` and
closed; a slow client whose requests each arrive whole within the bound is answered as any other, request after
request on one connection; hundreds of stalled clients do not keep a normal request from its answer, and once the
bound has passed their descriptors are gone. Real sockets against `helper-starter serve` (a SQLite store, no
Temporal)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from config.settings import Settings, SettingsError
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 2.0  # HELPER_API_READ_TIMEOUT_MS in these tests
SLACK_S = 8.0  # how late a close may come on a loaded machine: far less than never
STALLED = 300


@dataclass(frozen=True)
class Served:
    port: int
    pid: int

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=BOUND_S + 10)

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("read-timeout")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))},
        "HELPER_STORE_URL": f"sqlite+aiosqlite:///{tmp / 'helpers.sqlite3'}",
        "HELPER_RESULTS_DIR": str(tmp / "results"),
        "TEMPORAL_ADDRESS": "127.0.0.1:9",
        "HELPER_ENV_FILE": os.devnull,
        "HELPER_API_READ_TIMEOUT_MS": str(int(BOUND_S * 1000)),
    }
    subprocess.run([sys.executable, "-m", "store", "migrate"], cwd=ROOT, env=env, check=True, capture_output=True)
    port = free_port()
    log = (tmp / "serve.log").open("wb")
    service = subprocess.Popen(
        [sys.executable, "-m", "starter", "serve", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/livez", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert service.poll() is None and time.monotonic() < deadline, (tmp / "serve.log").read_text()
            time.sleep(0.1)
        yield Served(port, service.pid)
    finally:
        service.terminate()
        service.wait(timeout=30)
        log.close()


def _until_closed(connection: socket.socket) -> bytes:
    """Everything the service sends until it closes the connection (a reset counts as closed)."""
    received = b""
    try:
        while chunk := connection.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def _answer(connection: socket.socket) -> tuple[int, bytes]:
    """One whole answer (status and body) on a connection that stays open."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        assert chunk, f"closed before an answer: {received!r}"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = connection.recv(65536)
        assert chunk, "closed during the answer"
        body += chunk
    return int(head.split(b" ", 2)[1]), body


def _closed_within_the_bound(served: Served, sent: bytes) -> tuple[float, bytes]:
    with served.connect() as connection:
        began = time.monotonic()
        connection.sendall(sent)
        received = _until_closed(connection)
        return time.monotonic() - began, received


@pytest.mark.parametrize(
    "sent",
    [b"", b"GET /v1/owners/anna/helpers HT", b"GET /v1/owners/anna/helpers HTTP/1.1\r\nHost: api\r\nAccept: */"],
    ids=["nothing", "half the request line", "half the headers"],
)
def test_a_client_that_stalls_before_its_headers_are_in_is_closed_within_the_bound(served: Served, sent: bytes) -> None:
    elapsed, received = _closed_within_the_bound(served, sent)
    assert BOUND_S - 0.2 <= elapsed <= BOUND_S + SLACK_S, elapsed
    assert received == b""  # no request to answer: the connection is closed


def test_a_client_that_stalls_in_its_body_is_answered_408_and_closed(served: Served) -> None:
    head = b"POST /v1/owners/anna/read HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"
    elapsed, received = _closed_within_the_bound(served, head + b'Content-Length: 60\r\n\r\n{"turn": "t-1", ')
    assert BOUND_S - 0.2 <= elapsed <= BOUND_S + SLACK_S, elapsed
    status_line, _, rest = received.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout", received
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout" and "HELPER_API_READ_TIMEOUT_MS" in error["message"]
    # The metrics count it as the 408 it was, not as a fault of the service.
    metrics = httpx.get(f"http://127.0.0.1:{served.port}/metrics", timeout=10).text
    counted = [line for line in metrics.splitlines() if line.startswith("helper_api_requests_total{")]
    assert any('method="POST"' in line and 'status="408"' in line for line in counted), counted
    assert not any('status="500"' in line for line in counted), counted


def test_a_slow_client_whose_requests_arrive_whole_within_the_bound_is_answered(served: Served) -> None:
    """Each request takes most of the bound to arrive, and the connection lives well past the bound: each request's
    clock starts at its own first byte."""
    body = b'{"turn": "t-1", "helper_ids": []}'
    request = (
        b"POST /v1/owners/anna/read HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    began = time.monotonic()
    with served.connect() as connection:
        for _ in range(2):
            pieces = [request[at : at + 24] for at in range(0, len(request), 24)]
            for piece in pieces:
                connection.sendall(piece)
                time.sleep(BOUND_S * 0.6 / len(pieces))
            status, answer = _answer(connection)
            assert status == 422 and json.loads(answer)["error"]["code"] == "invalid_request"
            time.sleep(BOUND_S * 0.6)  # idle between requests: uvicorn's keep-alive (5 s) bounds this, not the read
        assert time.monotonic() - began > BOUND_S * 2
        connection.sendall(b"GET /v1/owners/anna/helpers HTTP/1.1\r\nHost: api\r\n\r\n")
        assert _answer(connection) == (200, b"[]")


def test_hundreds_of_stalled_clients_do_not_keep_a_request_from_its_answer(served: Served) -> None:
    """300 clients stalled at every stage of a request hold a descriptor each until the bound; meanwhile a normal
    request is answered at once, and after the bound their descriptors are gone."""
    before = served.descriptors()
    stages = [
        b"",
        b"GET /v1/owners/anna/helpers HTTP/1.1\r\nHost: a",
        b"POST /v1/owners/anna/read HTTP/1.1\r\nHost: api\r\nContent-Length: 500\r\n\r\n{",
    ]
    stalled = []
    first = time.monotonic()
    try:
        for number in range(STALLED):
            connection = served.connect()
            connection.sendall(stages[number % len(stages)])
            stalled.append(connection)
        began = time.monotonic()
        answered = httpx.get(f"http://127.0.0.1:{served.port}/v1/owners/anna/helpers", timeout=BOUND_S)
        assert (answered.status_code, answered.json()) == (200, [])
        assert time.monotonic() - began < BOUND_S, "answered before the stalled clients' bound, not behind them"
        if time.monotonic() - first < BOUND_S * 0.8:  # none has reached the bound yet: each holds a descriptor
            assert served.descriptors() >= before + STALLED * 0.9
        closed_by = time.monotonic() + BOUND_S + SLACK_S + 5
        for connection in stalled:
            connection.settimeout(max(0.1, closed_by - time.monotonic()))
            received = _until_closed(connection)
            assert received == b"" or received.startswith(b"HTTP/1.1 408 "), received[:200]
    finally:
        for connection in stalled:
            connection.close()
    deadline = time.monotonic() + 5
    while served.descriptors() > before + 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert served.descriptors() <= before + 5


def test_the_bound_is_a_setting_named_when_it_is_wrong() -> None:
    assert Settings.from_env({}).service.read_timeout_ms == 5_000
    assert Settings.from_env({"HELPER_API_READ_TIMEOUT_MS": "1_500"}).service.read_timeout_ms == 1_500
    with pytest.raises(SettingsError, match="HELPER_API_READ_TIMEOUT_MS='0'"):
        Settings.from_env({"HELPER_API_READ_TIMEOUT_MS": "0"})


def test_a_whole_request_that_waits_while_the_service_is_held_up_is_answered(served: Served) -> None:
    """The service, not the client, is slow: its process stopped for longer than the bound while a whole request
    waits in the socket. When it runs again, the bound that came due late is moved on, and the request is
    answered (under uvloop the overdue timer would otherwise run before the bytes are read)."""
    with served.connect() as connection:
        time.sleep(0.3)  # the service has taken the connection: its clock runs
        os.kill(served.pid, signal.SIGSTOP)
        try:
            connection.sendall(b"GET /livez HTTP/1.1\r\nHost: api\r\n\r\n")
            time.sleep(BOUND_S + 1.0)
        finally:
            os.kill(served.pid, signal.SIGCONT)
        status, _ = _answer(connection)
    assert status == 200
