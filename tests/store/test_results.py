"""Result directories: full outcome texts beside the rows, removal and the orphan sweep (R18, R23, R29)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from store.results import OUTCOME_JSON, OUTCOME_TEXT, ResultDirectories

RUSSIAN = "Готово: отчёт за третий квартал приложен."


def written(results: ResultDirectories, owner: str, helper_id: str, seq: int, body: str = "done") -> Path:
    directory = results.path_for(owner, helper_id, seq)
    results.write_outcome(directory, body, {"helper_id": helper_id, "seq": seq})
    return directory


def test_path_names_owner_helper_and_admission(tmp_path: Path) -> None:
    """R29: a helper id reused after retention never meets its old directory."""
    results = ResultDirectories(tmp_path)
    assert results.path_for("anna", "h1", 3) == tmp_path / "anna" / "h1.3"
    assert results.path_for("anna", "h1", 4) != results.path_for("anna", "h1", 3)


def test_write_outcome_writes_text_and_record_without_temporary_files(tmp_path: Path) -> None:
    """R18: the full text and the record are in the directory; no temporary file is left behind."""
    results = ResultDirectories(tmp_path / "results")
    directory = results.path_for("anna", "h1", 1)
    record: dict[str, Any] = {"kind": "completed", "summary": RUSSIAN, "actions": []}
    results.write_outcome(directory, RUSSIAN, record)
    assert sorted(p.name for p in directory.iterdir()) == sorted([OUTCOME_TEXT, OUTCOME_JSON])
    assert (directory / OUTCOME_TEXT).read_text(encoding="utf-8") == RUSSIAN
    raw = (directory / OUTCOME_JSON).read_text(encoding="utf-8")
    assert json.loads(raw) == record
    assert RUSSIAN in raw, "Russian is kept readable, not escaped"
    assert not list(directory.rglob("*.tmp"))


def test_rewriting_an_outcome_replaces_it_whole(tmp_path: Path) -> None:
    """R18, R19: a retried finalization writes the same directory again; the result is the new text, whole."""
    results = ResultDirectories(tmp_path)
    directory = written(results, "anna", "h1", 1, "first attempt, a long text " * 100)
    results.write_outcome(directory, "second", {"attempt": 2})
    assert results.read_text(directory) == "second"
    assert json.loads((directory / OUTCOME_JSON).read_text(encoding="utf-8")) == {"attempt": 2}
    assert not list(directory.rglob("*.tmp"))


def test_a_failed_write_never_leaves_half_an_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R18: the text is replaced atomically: a write that fails before the rename leaves the old text whole."""
    results = ResultDirectories(tmp_path)
    directory = written(results, "anna", "h1", 1, "the complete old outcome")

    def disk_full(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        results.write_outcome(directory, "a new outcome that never finished", {"x": 1})
    assert results.read_text(directory) == "the complete old outcome"


def test_read_text_of_a_missing_outcome_is_none(tmp_path: Path) -> None:
    """R18: a directory without an outcome (or no directory) reads as None."""
    results = ResultDirectories(tmp_path)
    assert results.read_text(tmp_path / "anna" / "nothing.1") is None
    directory = written(results, "anna", "h1", 1, RUSSIAN)
    assert results.read_text(directory) == RUSSIAN


def test_remove_deletes_the_directory(tmp_path: Path) -> None:
    """R23, R29: removal deletes the directory and its files; removing it again is fine."""
    results = ResultDirectories(tmp_path)
    directory = written(results, "anna", "h1", 1)
    assert results.remove(directory) is True
    assert not directory.exists()
    assert results.remove(directory) is True, "an already missing directory counts as removed"


def test_a_failing_removal_returns_false_and_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """R29: a failed directory removal is logged and reported, never raised, so the row operation succeeds."""
    results = ResultDirectories(tmp_path)
    directory = written(results, "anna", "h1", 1)

    def refuse(path: Any, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", refuse)
    with caplog.at_level(logging.WARNING, logger="store.results"):
        assert results.remove(directory) is False
    assert directory.exists()
    assert any(str(directory) in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_sweep_removes_only_directories_no_row_points_at(tmp_path: Path) -> None:
    """R29 and "no orphan result directories": the sweep removes orphans and keeps every known directory."""
    results = ResultDirectories(tmp_path / "results")
    kept = {written(results, "anna", "h1", 1), written(results, "boris", "h1", 4)}
    orphans = {written(results, "anna", "h2", 2), written(results, "anna", "h1", 0)}
    (tmp_path / "results" / "stray-file.txt").write_text("not a directory")
    (tmp_path / "results" / "anna" / "note.txt").write_text("not a directory")
    removed = results.sweep_orphans({path.resolve() for path in kept})
    assert set(removed) == orphans
    for path in kept:
        assert results.read_text(path) == "done"
    for path in orphans:
        assert not path.exists()
    assert (tmp_path / "results" / "stray-file.txt").exists() and (tmp_path / "results" / "anna" / "note.txt").exists()
    assert results.sweep_orphans({path.resolve() for path in kept}) == [], "a second sweep finds nothing"


def test_sweep_without_a_root_does_nothing(tmp_path: Path) -> None:
    """R29: before the first outcome there is nothing to sweep."""
    assert ResultDirectories(tmp_path / "not-yet").sweep_orphans(set()) == []


def test_sweep_reports_only_what_it_could_remove(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R29: an orphan that resists removal stays for the next sweep and is not reported as removed."""
    results = ResultDirectories(tmp_path)
    stubborn = written(results, "anna", "stubborn", 1)
    loose = written(results, "anna", "loose", 2)
    real_rmtree = shutil.rmtree

    def selective(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path) == stubborn:
            raise PermissionError(13, "Permission denied", str(path))
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", selective)
    assert results.sweep_orphans(set()) == [loose]
    assert stubborn.exists() and not loose.exists()


def test_sweep_keeps_directories_known_by_the_paths_rows_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R18, R29: a directory a row points at is never swept, whichever form the row stores its path in."""
    monkeypatch.chdir(tmp_path)
    results = ResultDirectories(Path("data/results"))  # the default Settings.results_dir is relative
    live = written(results, "anna", "h1", 1)
    row_result_dirs = {str(live)}  # what the row stores: str(path_for(...))
    results.sweep_orphans({Path(d) for d in row_result_dirs})
    assert results.read_text(live) == "done"


def test_sweep_refuses_when_orphans_are_the_majority(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """R29: a worker pointed at the wrong (or an empty) store would see every directory as an orphan: the sweep
    removes nothing and says why, while a handful of orphans among many known directories still go."""
    results = ResultDirectories(tmp_path)
    everything = [written(results, "anna", f"h{n}", n) for n in range(30)]
    with caplog.at_level(logging.ERROR, logger="store.results"):
        assert results.sweep_orphans(set()) == []
    assert all(path.exists() for path in everything)
    assert any("is this the right store" in record.getMessage() for record in caplog.records)
    known = {path.resolve() for path in everything[:25]}
    assert set(results.sweep_orphans(known)) == set(everything[25:])
