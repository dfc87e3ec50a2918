"""R43: a read command on a SQLite store runs on the stdlib driver without an event loop (`starter.cli.answer`),
still after every input is checked (R42), and answers what the event-loop path answers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from starter import cli

ROOT = Path(__file__).resolve().parents[2]


class _Exited(BaseException):
    def __init__(self, code: int) -> None:
        self.code = code


@pytest.fixture
def sqlite_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))},
        "HELPER_STORE_URL": f"sqlite+aiosqlite:///{tmp_path / 'helpers.sqlite3'}",
        "HELPER_RESULTS_DIR": str(tmp_path / "results"),
    }
    subprocess.run([sys.executable, "-m", "store", "migrate"], cwd=ROOT, env=env, check=True, capture_output=True)
    for name in [name for name in os.environ if name.startswith(("HELPER_", "TEMPORAL_"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    def exit_(code: int) -> None:
        raise _Exited(code)

    monkeypatch.setattr(os, "_exit", exit_)
    yield env


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    with pytest.raises(_Exited) as exited:
        cli.main(argv)
    return exited.value.code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "argv",
    [["list", "--owner", "anna"], ["unreported", "--owner", "anna"], ["usage", "--owner", "anna"]],
    ids=lambda argv: argv[0],
)
def test_a_sqlite_read_needs_no_event_loop(
    argv: list[str], sqlite_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """R43: with `asyncio.run` unusable, a SQLite read still answers; a missing helper is still refused (exit 1)."""

    def no_loop(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a SQLite read started an event loop")

    monkeypatch.setattr(asyncio, "run", no_loop)
    code, answer = _main(argv, capsys)
    assert code == 0, answer
    code, answer = _main(["show", "--owner", "anna", "--id", "h1"], capsys)
    assert (code, answer["error"]["code"]) == (1, "unknown_helper")


def test_the_store_is_opened_only_after_the_input_is_checked(
    sqlite_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """R42, R43: an invalid read is refused (exit 2) before the loopless path opens the store."""
    opened: list[bool] = []

    def record(settings: Any) -> None:
        opened.append(True)
        raise AssertionError("opened the store before the input was checked")

    monkeypatch.setattr(cli, "open_sqlite_reader", record)
    for argv in (["list", "--owner", "a b"], ["show", "--owner", "anna", "--id", "../x"], ["usage", "--owner", ""]):
        code, answer = _main(argv, capsys)
        assert (code, answer["error"]["code"]) == (2, "invalid_request")
    assert opened == []


def test_a_coroutine_that_suspends_is_not_run_without_a_loop() -> None:
    """R43: the loopless driver refuses (never hangs on) a read that would need an event loop."""

    async def suspends() -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="needs an event loop"):
        cli._finish_without_loop(suspends())
