"""R42: the starter keeps its contract with Temporal down: exit 0 done, 1 refused, 2 invalid, 3 unavailable;
one JSON object on stdout, one short line on stderr for an error, never a traceback.

Each command meets each class of bad input (bad id, empty task, unknown language, out-of-range limit, oversized
text, non-UTF-8 or NUL task file, unknown flag, missing argument, bad --every) with Temporal unreachable
(127.0.0.1:9): every one is refused with exit 2 before anything is connected to, so nothing is written (R5)
and Iva never retries a bad request. The bad-input cases run again with Temporal up (a dev server): same
answers, and no workflow was started. Valid writes answer exit 3 (asking again is safe); valid reads still
answer from the store. Echoed input is cut short and no password is ever printed.

`python -m starter` runs as a subprocess (its `main` ends with `os._exit`); the cases run concurrently.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
LONG = "x" * 10_000
SECRET = "s3cretpw"
OWNER = ["--owner", "anna"]
REMOTE = {"TEMPORAL_ADDRESS": "temporal.example.invalid:7233"}  # not this machine: encryption is required
TEMPORAL_CLI = Path(sys.executable).parent / "temporal"
QUIET = ["--log-level", "error"]


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    exit_code: int = 2
    code: str | None = "invalid_request"  # error.code; None when the answer is not an error
    env: dict[str, str] = field(default_factory=dict)
    console: bool = False  # True: also run as `python -m starter` (a subprocess); else `main` in this process


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def _start(*extra: str, task: list[str] | None = None) -> list[str]:
    return ["start", *OWNER, "--id", "h1", "--model", "gpt-5", *(task or ["--task", "Find it"]), *extra]


def _goal_add(*extra: str, every: str = "1h", task: str = "Check the inbox") -> list[str]:
    return ["goal", "add", *OWNER, "--goal", "inbox", "--every", every, "--model", "gpt-5", "--task", task, *extra]


CASES = [
    # bad ids, in every command that takes one
    Case("start 10,000-char id", ["start", *OWNER, "--id", LONG, "--model", "m", "--task", "t"], console=True),
    Case("list bad owner", ["list", "--owner", "a b"]),
    Case("show bad id", ["show", *OWNER, "--id", "a/b"]),
    Case("unreported bad owner", ["unreported", "--owner", "/abs"]),
    Case("read bad helper id", ["read", *OWNER, "--turn", "t1", "ok", "bad id"]),
    Case("delivered empty owner", ["delivered", "--owner", "", "--turn", "t1", "--answer-chars", "5"]),
    Case("close bad id", ["close", *OWNER, "--id=-x"]),
    Case("usage 10,000-char owner", ["usage", "--owner", LONG]),
    # watch prints human lines, but its errors keep the contract: exit 2, one JSON object, nothing connected
    Case("watch bad owner", ["watch", "--owner", "a b"], console=True),
    Case("watch 10,000-char owner", ["watch", "--owner", LONG]),
    Case("watch empty owner", ["watch", "--owner", "", "--once"]),
    Case("watch bad id", ["watch", *OWNER, "--id", "../etc"], console=True),
    Case("watch missing owner", ["watch", "--once"]),
    Case("watch unknown flag", ["watch", *OWNER, "--json"]),
    Case("watch bad setting", ["watch", *OWNER, "--once"], 2, "invalid_configuration", {"HELPER_MAX_OPEN": "abc"}),
    Case(
        "goal add bad owner",
        ["goal", "add", "--owner", "a b", "--goal", "g", "--every", "1h", "--model", "m", "--task", "t"],
        console=True,
    ),
    Case("goal list bad owner", ["goal", "list", "--owner", "../x"]),
    Case("goal pause long goal id", ["goal", "pause", *OWNER, "--goal", "g" * 41]),
    Case("goal resume bad goal id", ["goal", "resume", *OWNER, "--goal", "a/b"]),
    Case("goal run bad owner", ["goal", "run", "--owner", "", "--goal", "g"]),
    Case("goal remove bad goal id", ["goal", "remove", *OWNER, "--goal", ".."]),
    Case("start bad id", ["start", *OWNER, "--id", "../etc", "--model", "m", "--task", "t"]),
    Case("goal add bad goal id", [*_goal_add()[:5], "g g", *_goal_add()[6:]]),
    # empty task, unknown language, bad model
    Case("start empty task", _start(task=["--task", "   "])),
    Case("goal add empty task", _goal_add(task=" ")),
    Case("start unknown language", _start("--language", "xx")),
    Case("goal add unknown language", _goal_add("--language", LONG)),
    Case("goal add model too long", _goal_add("--model", "m" * 101)),
    # out-of-range limits, answer chars, turns
    Case("start zero limit", _start("--deadline-ms", "0")),
    Case("start looser limit", _start("--max-steps", "1000000")),
    Case("start non-numeric limit", _start("--ceiling-tokens", "lots")),
    Case("read turn too long", ["read", *OWNER, "--turn", "t" * 201, "h1"]),
    Case("delivered zero answer chars", ["delivered", *OWNER, "--turn", "t1", "--answer-chars", "0"]),
    Case("read turn with a control character", ["read", *OWNER, "--turn", "t\x07", "h1"]),
    # oversized text
    Case("start oversized task", _start(task=["--task", "x" * 20_001])),
    Case("goal add oversized task", _goal_add(task="x" * 20_001)),
    Case("start oversized boundary", _start("--boundary", "send_mail to " + "b" * 300)),
    # task files: not UTF-8, NUL
    Case("start non-UTF-8 task file", _start(task=["--task-file", "{tmp}/latin1.txt"])),
    Case("start NUL in task file", _start(task=["--task-file", "{tmp}/nul.txt"]), console=True),
    # unknown flags and commands, missing arguments
    Case("start unknown flag", _start("--bogus"), console=True),
    Case("goal add unknown flag", _goal_add("--colour", "red")),
    Case("unknown command", ["frobnicate", *OWNER]),
    Case("unknown goal command", ["goal", "frobnicate", *OWNER]),
    Case("no command", []),
    Case("start missing model", ["start", *OWNER, "--id", "h1", "--task", "t"]),
    Case("read missing helper ids", ["read", *OWNER, "--turn", "t1"]),
    Case("delivered missing answer chars", ["delivered", *OWNER, "--turn", "t1"]),
    Case("goal pause missing goal", ["goal", "pause", *OWNER]),
    # bad --every
    Case("goal add every overflows", _goal_add(every="9999999999d"), console=True),
    Case("goal add every not a duration", _goal_add(every="1 fortnight")),
    Case("goal add every too short", _goal_add(every="30s")),
    Case("goal add every too long", _goal_add(every="367d")),
    Case("goal add every with 5,000 digits", _goal_add(every="9" * 5_000 + "d")),
    # configuration: the operator's error, never a password
    Case("bad setting", ["list", *OWNER], 2, "invalid_configuration", {"HELPER_MAX_OPEN": "abc"}, console=True),
    Case(
        "store URL without @",
        ["list", *OWNER],
        2,
        "invalid_configuration",
        {"HELPER_STORE_URL": f"postgresql+asyncpg://anna:{SECRET}-db.local/helpers"},
        console=True,  # the store URL is checked where the store is opened
    ),
    Case(
        "store URL down",
        ["list", *OWNER],
        3,
        "unavailable",
        {"HELPER_STORE_URL": f"postgresql+asyncpg://anna:{SECRET}@127.0.0.1:9/helpers?password={SECRET}"},
        console=True,
    ),
    # encryption: without keys a write to a Temporal elsewhere is refused before connecting (R39); reads need none
    Case("start without keys, Temporal elsewhere", _start(), 2, "invalid_configuration", REMOTE, console=True),
    Case("goal add without keys, Temporal elsewhere", _goal_add(), 2, "invalid_configuration", REMOTE, console=True),
    Case("list without keys, Temporal elsewhere", ["list", *OWNER], 0, None, REMOTE, console=True),
    Case("start with a malformed key", _start(), 2, "invalid_configuration", {"HELPER_CODEC_KEYS": "k1:no!"}, True),
    Case("bad encryption flag", ["list", *OWNER], 2, "invalid_configuration", {"HELPER_CODEC_REQUIRED": "maybe"}),
    # valid input with Temporal down: writes are unavailable (exit 3), reads answer from the store
    Case("start valid, Temporal down", _start(), 3, "unavailable", console=True),
    Case("goal add valid, Temporal down", _goal_add(), 3, "unavailable", console=True),
    Case("close valid, Temporal down", ["close", *OWNER, "--id", "h1"], 3, "unavailable", console=True),
    Case("list valid", ["list", *OWNER], 0, None, console=True),
    Case("show unknown helper", ["show", *OWNER, "--id", "h1"], 1, "unknown_helper", console=True),
    Case("watch once, unknown helper", ["watch", *OWNER, "--id", "h1", "--once"], 1, "unknown_helper", console=True),
]


CONSOLE = [case for case in CASES if case.console]
IN_PROCESS = [case for case in CASES if not case.console]


class _Exited(BaseException):
    def __init__(self, code: int) -> None:
        self.code = code


def _run(case: Case, tmp: Path, env: dict[str, str]) -> Result:
    """One case as `python -m starter`, in a subprocess."""
    argv = [arg.replace("{tmp}", str(tmp)) for arg in case.argv]
    done = subprocess.run(
        [sys.executable, "-m", "starter", *argv],
        cwd=ROOT,
        env={**env, **case.env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    return Result(done.returncode, done.stdout.decode("utf-8"), done.stderr.decode("utf-8", "replace"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("cli-contract")
    (tmp / "latin1.txt").write_bytes("Café report".encode("latin-1"))
    (tmp / "nul.txt").write_bytes(b"Find the report\x00 and mail it")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))},
        "TEMPORAL_ADDRESS": "127.0.0.1:9",  # nothing listens: Temporal is down
        "HELPER_STORE_URL": f"sqlite+aiosqlite:///{tmp / 'helpers.sqlite3'}",
        "HELPER_RESULTS_DIR": str(tmp / "results"),
        "HELPER_STARTER_TIMEOUT_MS": "10000",
    }
    subprocess.run([sys.executable, "-m", "store", "migrate"], cwd=ROOT, env=env, check=True, capture_output=True)
    yield tmp, env


@pytest.fixture(scope="module")
def console(store: tuple[Path, dict[str, str]]) -> dict[str, Result]:
    """The console-script cases at once: each is a ~1 s interpreter start-up, so they run side by side."""
    tmp, env = store
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = pool.map(lambda case: _run(case, tmp, env), CONSOLE)
        return {case.name: answer for case, answer in zip(CONSOLE, answers, strict=True)}


def _check(case: Case, result: Result) -> None:
    assert result.returncode == case.exit_code, (result.stdout, result.stderr)
    answer: Any = json.loads(result.stdout)  # the whole of stdout is one JSON value
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert SECRET not in result.stdout + result.stderr
    assert "x" * 41 not in result.stdout + result.stderr  # echoed input is cut to a short prefix
    if case.code is None:
        assert result.stderr == ""
        return
    assert isinstance(answer, dict) and set(answer) == {"error"}
    assert answer["error"]["code"] == case.code
    assert isinstance(answer["error"]["message"], str) and answer["error"]["message"]
    assert len(result.stdout) < 4_000
    lines = result.stderr.splitlines()
    assert lines and len(lines[-1]) <= 300
    if case.exit_code == 2:
        assert len(lines) == 1, result.stderr


@pytest.mark.parametrize("case", CONSOLE, ids=[case.name for case in CONSOLE])
def test_console_script(case: Case, console: dict[str, Result]) -> None:
    """R42 (and R5 for refused writes), through `python -m starter` with Temporal down: the exit code the
    contract names, exactly one JSON object on stdout, the error's code, one short stderr line for an
    error, no traceback, no echoed long input, no password."""
    _check(case, console[case.name])


@pytest.mark.parametrize("case", IN_PROCESS, ids=[case.name for case in IN_PROCESS])
def test_refused_before_connecting(
    case: Case,
    store: tuple[Path, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """R42, R5: each bad input is refused with exit 2 and one JSON object by `main`, which never tried to
    open the store or connect to Temporal (connecting would fail the test)."""
    from starter import cli
    from starter.client import HelperClient
    from starter.reads import StoreReader

    tmp, env = store
    connects: list[bool] = []

    async def no_connect(cls: type[HelperClient], settings: Any, *, temporal: bool = True) -> HelperClient:
        connects.append(temporal)
        raise AssertionError("connected before the input was validated")

    def exit_(code: int) -> None:
        raise _Exited(code)

    async def no_open(cls: type[StoreReader], settings: Any) -> StoreReader:
        connects.append(False)
        raise AssertionError("opened the store before the input was validated")

    monkeypatch.setattr(HelperClient, "connect", classmethod(no_connect))
    monkeypatch.setattr(StoreReader, "open", classmethod(no_open))
    monkeypatch.setattr(os, "_exit", exit_)
    for name in [name for name in os.environ if name.startswith(("HELPER_", "TEMPORAL_"))]:
        monkeypatch.delenv(name)
    for name, value in {**env, **case.env}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(_Exited) as exited:
        cli.main([arg.replace("{tmp}", str(tmp)) for arg in case.argv])
    out, err = capsys.readouterr()
    assert connects == []
    _check(case, Result(exited.value.code, out, err))


@pytest.fixture(scope="module")
def temporal_up(store: tuple[Path, dict[str, str]]) -> Iterator[str]:
    """A Temporal dev server (in memory) that answers, for the same bad inputs."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    server = subprocess.Popen(
        [TEMPORAL_CLI, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port), *QUIET],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while _workflow_count(address) is None:
            assert time.monotonic() < deadline and server.poll() is None, "the dev server did not start"
            time.sleep(0.3)
        yield address
    finally:
        server.terminate()
        server.wait(timeout=30)


def _workflow_count(address: str) -> int | None:
    done = subprocess.run(
        [TEMPORAL_CLI, "workflow", "count", "--address", address, "-o", "json"], capture_output=True, timeout=30
    )
    # Protobuf JSON leaves out a zero count.
    return int(json.loads(done.stdout).get("count", 0)) if done.returncode == 0 else None


BAD_INPUT = [case for case in CONSOLE if case.exit_code == 2]


def test_bad_input_with_temporal_up(store: tuple[Path, dict[str, str]], temporal_up: str) -> None:
    """R42, R5: with Temporal answering, every bad input gets the same exit 2 and JSON error as with it down,
    and no workflow was started."""
    tmp, env = store
    up = {**env, "TEMPORAL_ADDRESS": temporal_up}
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda case: _run(case, tmp, up), BAD_INPUT))
    for case, answer in zip(BAD_INPUT, answers, strict=True):
        _check(case, answer)
    assert _workflow_count(temporal_up) == 0


def test_nothing_was_written(store: tuple[Path, dict[str, str]], console: dict[str, Result]) -> None:
    """R5, R42: no case, refused or unavailable, wrote anything: every table of the store is still empty."""
    tmp, _ = store
    assert len(console) == len(CONSOLE)
    with sqlite3.connect(tmp / "helpers.sqlite3") as connection:
        tables = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        counts = {t: connection.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}
    assert "helper_rows" in tables, tables
    assert {t: n for t, n in counts.items() if t != "alembic_version" and n} == {}


STORE_ENV = ["HELPER_STORE_URL", "HELPER_RESULTS_DIR"]
TEMPORAL_ENV = [*STORE_ENV, "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "HELPER_CODEC_KEYS", "HELPER_STARTER_TIMEOUT_MS"]
MODEL_NAMES = ["catalog", '"scripted"', '"openai:<model>"', "docs/reference-core.md"]
HELP = [
    (["start"], ["--owner", "--id", "--task", "--model", "--language", "--boundary", *TEMPORAL_ENV, *MODEL_NAMES]),
    (["start"], ["HELPER_MAX_OPEN", "HELPER_DEADLINE_MS"]),
    (["list"], ["--owner", "--state", *STORE_ENV]),
    (["show"], ["--owner", "--id", *STORE_ENV]),
    (["close"], ["--owner", "--id", *TEMPORAL_ENV]),
    (["unreported"], ["--owner", *STORE_ENV]),
    (["read"], ["--owner", "--turn", "HELPER_ID", *TEMPORAL_ENV]),
    (["delivered"], ["--answer-chars", *TEMPORAL_ENV]),
    (["usage"], ["--owner", *STORE_ENV]),
    (["watch"], ["--owner", "--id", "--once", *STORE_ENV, "Ctrl-C (exit 0)", "0.5 s"]),
    (["goal", "add"], ["--every", "--goal", "--model", *TEMPORAL_ENV, *MODEL_NAMES]),
    (["goal", "list"], ["--owner", *TEMPORAL_ENV]),
    (["goal", "remove"], ["--goal", *TEMPORAL_ENV]),
]


def _options_with_help(parser: Any) -> list[tuple[str, str | None]]:
    return [(action.dest, action.help) for action in parser._actions if action.dest != "help"]


@pytest.mark.parametrize(("argv", "names"), HELP, ids=[" ".join(argv) + f"-{i}" for i, (argv, _) in enumerate(HELP)])
def test_help_names_arguments_and_exit_codes(argv: list[str], names: list[str]) -> None:
    """R42: each command's --help names its arguments, each with a description, the environment variables it
    reads, where model names come from (for the commands that take one) and the exit codes."""
    from starter.arguments import build_parser

    sub: Any = build_parser()
    for word in argv:
        sub = next(
            action.choices[word]
            for action in sub._actions
            if isinstance(action.choices, dict) and word in action.choices
        )
    text = " ".join(sub.format_help().split())  # argparse wraps long descriptions
    for name in names:
        assert " ".join(name.split()) in text, name
    undescribed = [dest for dest, description in _options_with_help(sub) if not description]
    assert not undescribed, undescribed
    assert "Exit codes" in text and "3 unavailable" in text and "Environment (variable, default" in text


@pytest.mark.parametrize("command", [["start", "--owner", "bad owner!", "--id", "h1", "--model", "m", "--task", "t"]])
def test_a_reader_that_went_away_gets_no_traceback(command: list[str], tmp_path: Path) -> None:
    """`helper-starter … | head -c 0`: the answer cannot be written, yet the exit code still says how it went and
    stderr holds the one-line error, never a traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the starter writes
    try:
        done = subprocess.run(
            [sys.executable, "-m", "starter", *command],
            cwd=ROOT,
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 2
    assert b"Traceback" not in done.stderr and b"BrokenPipeError" not in done.stderr, done.stderr
    assert done.stderr.startswith(b"helper-starter: invalid_request"), done.stderr
