"""The contract's one table (R42, R47): each kind of error knows its exit code and its HTTP status, and the
documentation says the same."""

from pathlib import Path

import pytest

from protocol.errors import (
    UNKNOWN_GOAL,
    UNKNOWN_HELPER,
    Accepted,
    Busy,
    HelperRefused,
    InvalidConfiguration,
    InvalidRequest,
    StarterError,
    Unavailable,
)
from starter.arguments import EXIT_CODES

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
KINDS: list[tuple[str, StarterError, int, int]] = [
    ("refused", HelperRefused("too_many_open", "three are open"), 1, 409),
    ("refused", HelperRefused(UNKNOWN_HELPER, "no such helper"), 1, 404),
    ("refused", HelperRefused(UNKNOWN_GOAL, "no such Goal"), 1, 404),
    ("invalid request", InvalidRequest("a bad id"), 2, 422),
    ("invalid configuration", InvalidConfiguration("a bad key"), 2, 500),
    ("unavailable", Unavailable("Temporal did not answer"), 3, 503),
    ("accepted", Accepted("not answered in time"), 4, 202),
    ("busy", Busy("too many writes", 3), 5, 429),
]


@pytest.mark.parametrize(("label", "error", "exit_code", "status"), KINDS)
def test_each_error_kind_has_its_exit_code_and_status_as_documented(
    label: str, error: StarterError, exit_code: int, status: int
) -> None:
    assert (error.exit_code, error.http_status) == (exit_code, status)
    rows = [line for line in API_DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| exit ")]
    row = next(line for line in rows if line.startswith(f"| exit {exit_code}, {label} |"))
    assert str(status) in row.split("|")[2], f"docs/api.md says {row.split('|')[2].strip()!r} for {label}"


@pytest.mark.parametrize(("label", "error", "exit_code", "status"), KINDS)
def test_the_command_lines_help_gives_each_error_kind_its_exit_code(
    label: str, error: StarterError, exit_code: int, status: int
) -> None:
    """`helper-starter --help` lists the exit codes: each kind's line names it by its code's number."""
    lines = [line.strip() for line in EXIT_CODES.splitlines()]
    line = next(line for line in lines if line.startswith(f"{error.exit_code}  "))
    assert line.split()[1].rstrip(":") == label.split()[0], f"the help says {line!r} for {label}"
