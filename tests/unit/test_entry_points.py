"""Every entry point answers --help touching nothing: run as a new user runs it, from an empty folder with a clean
environment and no server or store anywhere, each exits 0 without a traceback, names the variables it reads and its
exit codes, creates no file in the folder or in HOME, and connects to nothing (Temporal, the core, the chat and the
trace exporter are pointed at a listener that counts every connection; the settings hold a value that would stop
any process that read them)."""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from config.settings import tree_variables
from starter.arguments import READ_SETTINGS, WRITE_SETTINGS, build_parser

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PYTHON = str(BIN / "python")
STARTER_CODES = (0, 1, 2, 3, 4, 5)  # starter.arguments.EXIT_CODES
RUN_WITHIN_S = 60
# Starter commands that only read the store; the others write through Temporal.
STARTER_READS = {"list", "show", "unreported", "usage", "watch", "waits", "audit"}


def _names(**selection: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name, _ in tree_variables(**selection))  # type: ignore[arg-type]


@dataclass(frozen=True)
class EntryPoint:
    argv: tuple[str, ...]
    variables: tuple[str, ...]
    codes: tuple[int, ...] = (0, 1, 2)

    @property
    def name(self) -> str:
        return " ".join(Path(self.argv[0]).name if i == 0 else part for i, part in enumerate(self.argv))


def _starter_commands() -> Iterator[tuple[str, ...]]:
    """Every command and subcommand of the starter's parser: one added later is covered too."""

    def walk(parser: argparse.ArgumentParser, prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield (*prefix, name)
                    yield from walk(child, (*prefix, name))

    yield from walk(build_parser(), ())


def entry_points() -> list[EntryPoint]:
    worker = _names(without=("service", "codec"))
    codec = _names(only=("codec_keys", "codec_key_id", "codec"))
    points = [
        EntryPoint((str(BIN / "helper-worker"), "--help"), worker),
        EntryPoint((PYTHON, str(ROOT / "worker.py"), "--help"), worker),
        EntryPoint((str(BIN / "helper-starter"), "--help"), _names(only=(*WRITE_SETTINGS, "service")), STARTER_CODES),
        EntryPoint((PYTHON, "-m", "starter", "--help"), _names(only=READ_SETTINGS), STARTER_CODES),
        EntryPoint((PYTHON, "-m", "store", "--help"), ("HELPER_STORE_URL",)),
        EntryPoint((PYTHON, "-m", "store", "migrate", "--help"), ("HELPER_STORE_URL",)),
        EntryPoint((PYTHON, "-m", "codec", "--help"), codec),
        EntryPoint((PYTHON, "-m", "codec", "serve", "--help"), codec),
        EntryPoint((PYTHON, "-m", "codec", "key", "--help"), (), (0, 2)),
        EntryPoint((PYTHON, "-m", "tools.demo", "--help"), ("PORT_BASE", "WORKERS", "HELPER_CODEC_KEYS"), (0, 1, 2)),
        EntryPoint((PYTHON, "-m", "tools.demo", "run", "--help"), ("PORT_BASE", "WORKERS"), (0, 1, 2)),
        EntryPoint((PYTHON, "-m", "tools.demo", "demo", "--help"), ("PORT_BASE", "WORKERS"), (0, 1, 2)),
        EntryPoint(
            (str(BIN / "reference-core"), "--help"),
            ("REFERENCE_CORE_HOST", "REFERENCE_CORE_PORT", "REFERENCE_CORE_DB", "REFERENCE_CORE_OPENAI_BASE_URL"),
        ),
        EntryPoint((str(BIN / "reference-chat"), "--help"), ("REFERENCE_CHAT_HOST", "REFERENCE_CHAT_PORT")),
    ]
    for command in _starter_commands():
        settings = READ_SETTINGS if command[0] in STARTER_READS else WRITE_SETTINGS
        points.append(
            EntryPoint((str(BIN / "helper-starter"), *command, "--help"), _names(only=settings), STARTER_CODES)
        )
    return points


class ConnectionTrap:
    """A loopback listener that counts the connections it is offered."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.port = self.server.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.server.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.server.close()


def _clean_env(home: Path, trap: ConnectionTrap) -> dict[str, str]:
    """A new user's environment: PATH and HOME, the addresses a process would connect to pointed at the trap, and
    settings no process could start with (a --help that read them would fail on them)."""
    address = f"127.0.0.1:{trap.port}"
    return {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TEMPORAL_ADDRESS": address,
        "HELPER_CORE_URL": f"http://{address}",
        "HELPER_CHAT_URL": f"http://{address}",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{address}",
        "HELPER_MAX_OPEN": "not-a-number",
        "REFERENCE_CORE_OPENAI_TIMEOUT_S": "not-a-number",
    }


@dataclass
class Answer:
    point: EntryPoint
    code: int
    stdout: str
    stderr: str
    left: list[str]


def _ask_for_help(point: EntryPoint, scratch: Path, trap: ConnectionTrap) -> Answer:
    cwd, home = scratch / "cwd", scratch / "home"
    cwd.mkdir(parents=True)
    home.mkdir()
    done = subprocess.run(
        point.argv, cwd=cwd, env=_clean_env(home, trap), capture_output=True, text=True, timeout=RUN_WITHIN_S
    )
    left = [str(path.relative_to(scratch)) for path in sorted(scratch.rglob("*")) if path not in (cwd, home)]
    return Answer(point, done.returncode, done.stdout, done.stderr, left)


def _answers(scratch: Path, trap: ConnectionTrap) -> list[Answer]:
    """Every --help at once, a few at a time (each is an interpreter's start)."""
    points = entry_points()
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda item: _ask_for_help(item[1], scratch / str(item[0]), trap), enumerate(points)))


def test_every_console_script_is_asked() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {f"{script} --help" for script in scripts} <= {point.name for point in entry_points()}


def test_help_names_its_variables_and_exit_codes_and_touches_nothing(tmp_path: Path) -> None:
    """One test, so the subprocesses run once whichever test worker takes it."""
    trap = ConnectionTrap()
    try:
        answers = _answers(tmp_path, trap)
    finally:
        trap.close()
    problems = []
    for answer in answers:
        name, text = answer.point.name, answer.stdout
        if answer.code != 0 or "Traceback" in answer.stderr or not text.startswith("usage:"):
            problems.append(f"{name}: exit {answer.code}, stderr {answer.stderr[-300:]!r}")
            continue
        missing = [variable for variable in answer.point.variables if not re.search(rf"\b{variable}\b", text)]
        codes = [code for code in answer.point.codes if not re.search(rf"^\s+{code}\s", text, re.M)]
        if missing or codes or "Exit codes:" not in text:
            problems.append(f"{name}: variables {missing} and exit codes {codes} are not named")
        if answer.left:
            problems.append(f"{name}: created {answer.left} in the working folder or HOME")
    assert not problems, "\n".join(problems)
    assert trap.accepted == 0, "a --help connected to Temporal, the core, the chat or the trace exporter"
