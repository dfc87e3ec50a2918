"""Ids are checked wherever they enter, and no path derived from one leaves the results root (R40)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from contracts.core_api import CreateSession
from domain.book import Entry, OwnerBook
from domain.goals import Goal
from domain.ids import GOAL_ID_MAX, ID_MAX_CHARS, check_goal_id, check_id, directory_name, echo
from domain.limits import FollowTuning, Limits
from domain.messages.activities import FollowRequest, RemoveRows, RowKey, RowToRemove, SessionRef
from domain.messages.signals import FinishedNotice
from domain.messages.updates import ReadRequest
from domain.messages.workflows import CoordinatorStart, HelperStart
from domain.outcome import OutcomeKind
from domain.rows import RowState
from protocol.errors import InvalidRequest
from starter.inputs import check_goal_ids
from store.results import ResultDirectories
from store.schema import Base

NOW = datetime(2026, 11, 30, tzinfo=UTC)
BAD_IDS = ["/tmp/scratch", "../x", "a/../../b", "", ".hidden", "x" * 65, "a\x00b", "a b", "ANNA/..", "~anna"]


def _models(bad: str) -> list[object]:
    """Every model that carries an id into a path, a store key or a workflow id, built with `bad`."""
    return [
        lambda: CoordinatorStart(owner=bad),
        lambda: OwnerBook(owner=bad),
        lambda: OwnerBook(owner="anna", entries={bad: {"helper_id": "h1", "seq": 1, "state": "waiting",
                                                       "hard_ceiling_ms": 1, "admitted_at": NOW}}),
        lambda: Entry(helper_id=bad, seq=1, state=RowState.WAITING, hard_ceiling_ms=1, admitted_at=NOW),
        lambda: FinishedNotice(helper_id=bad, kind=OutcomeKind.COMPLETED, generation=2, finished_at=NOW),
        lambda: RowKey(owner=bad, helper_id="h1", seq=1, generation=1),
        lambda: RowKey(owner="anna", helper_id=bad, seq=1, generation=1),
        lambda: RemoveRows(owner=bad, rows=[]),
        lambda: RemoveRows(owner="anna", rows=[RowToRemove(helper_id=bad, seq=1)]),
        lambda: SessionRef(owner=bad, helper_id="h1", session_id="s-1"),
        lambda: ReadRequest(turn="t-1", helper_ids=[bad]),
        lambda: FollowRequest(owner=bad, helper_id="h1", seq=1, session_id="s", generation=1, ceiling_tokens=1,
                              tuning=FollowTuning()),
        lambda: HelperStart(owner=bad, helper_id="h1", seq=1, language="en", model="m", limits=Limits(),
                            slot_granted=True, summary_max=100, check_ms=1, follow=FollowTuning(), title="t"),
    ]  # fmt: skip


@pytest.mark.parametrize("bad", BAD_IDS)
def test_every_model_that_carries_an_id_refuses_a_bad_one(bad: str) -> None:
    """R40: a crafted workflow input, signal or activity input with an id like an absolute path is refused
    before anything uses it."""
    for build in _models(bad):
        with pytest.raises(ValidationError):
            build()  # type: ignore[operator]


def test_a_refused_id_is_echoed_short() -> None:
    """R42: an error repeats a short prefix of the input, never a 10,000-character id."""
    with pytest.raises(ValidationError) as refused:
        CoordinatorStart(owner="x" * 10_000)
    assert "x" * 100 not in str(refused.value)
    assert len(echo("y" * 10_000)) <= 40


def test_result_paths_never_leave_the_root(tmp_path: Path) -> None:
    """R40: the path of a result directory is inside the root, whatever the ids; removal refuses anything
    outside it (a crafted row, another store) and touches nothing."""
    results = ResultDirectories(tmp_path / "results")
    assert results.path_for("anna", "h1", 3) == tmp_path / "results" / "anna" / "h1.3"
    for tricky in ("a..", "a..b", "a.", "a-..-", "A..", "a" + "." * 63):  # valid ids full of dots
        assert results.inside(results.path_for(tricky, tricky, 1)).parent.parent == tmp_path / "results"
    for bad in BAD_IDS:
        with pytest.raises(ValueError):
            results.path_for(bad, "h1", 1)
        with pytest.raises(ValueError):
            results.path_for("anna", bad, 1)
    outside = tmp_path / "scratch" / "x.1"
    outside.mkdir(parents=True)
    assert results.remove(outside) is False
    assert results.remove(tmp_path / "results" / ".." / "scratch" / "x.1") is False
    assert outside.exists()


def test_ids_that_differ_only_in_case_get_their_own_directories(tmp_path: Path) -> None:
    """R40, R34: on a case-insensitive volume `ANNA` and `anna` would share one directory; they do not."""
    names = {directory_name(owner) for owner in ("anna", "ANNA", "Anna")}
    assert len({name.casefold() for name in names}) == 3
    assert directory_name("anna") == "anna"
    results = ResultDirectories(tmp_path)
    assert results.path_for("ANNA", "h1", 1).parent != results.path_for("anna", "h1", 1).parent


def test_the_id_format_has_one_home_every_entry_uses() -> None:
    """R5, R40: the longest id the runtime takes is the longest the core's session contract and the store's key
    columns take; a Goal's id is checked by one rule, in the same words from the starter and from a Goal."""
    longest = "a" * ID_MAX_CHARS
    check_id("helper id", longest)
    session = {"idempotency_key": "k", "task": "t", "language": "en", "model": "m"}
    limits = {"max_steps": 1, "max_input_tokens": 1}
    assert CreateSession.model_validate({**session, "owner": longest, "helper_id": longest, "limits": limits})
    with pytest.raises(ValidationError):
        CreateSession.model_validate({**session, "owner": longest + "a", "helper_id": "h1", "limits": limits})
    keys = [c for t in Base.metadata.tables.values() for c in t.columns if c.name in ("owner", "helper_id", "goal_id")]
    assert keys and all(getattr(c.type, "length", None) == ID_MAX_CHARS for c in keys)
    too_long = "g" * (GOAL_ID_MAX + 1)
    with pytest.raises(ValueError) as from_domain:
        check_goal_id(too_long)
    with pytest.raises(InvalidRequest) as from_starter:
        check_goal_ids("anna", too_long)
    assert str(from_starter.value) == f"goal_id: {from_domain.value}"
    with pytest.raises(ValidationError, match=str(from_domain.value)):
        Goal(owner="anna", goal_id=too_long, task="t", model="m", every_ms=3_600_000)
    assert check_goal_id("g" * GOAL_ID_MAX)
