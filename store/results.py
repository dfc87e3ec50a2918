"""Result directories: the full outcome text of each helper, beside its row (R18, R29).

A directory is named after the owner, the helper and its admission `seq`, so a helper id reused after
retention never meets an old directory. Removal failures are logged and reported, never raised: the
row operation that asked for the removal still succeeds, and `sweep_orphans` cleans up later.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from domain.ids import directory_name

log = logging.getLogger(__name__)

# The sweep removes orphans only while they are a minority (or a handful): a guard against the wrong store.
SWEEP_SANITY_SHARE = 0.5
SWEEP_SANITY_MINIMUM = 20
OUTCOME_TEXT = "outcome.md"
OUTCOME_JSON = "outcome.json"
# The followed session's latest snapshot, whole: what payloads and rows carry only in part (R36).
SESSION_JSON = "session.json"


class ResultDirectories:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path_for(self, owner: str, helper_id: str, seq: int) -> Path:
        """The directory of one admission's outcome, inside the root by construction (R40): each id is checked to
        be one path component that cannot climb (domain.ids), and an id with capitals gets a directory of its own
        even on a case-insensitive volume. Paths read back from rows are checked with `inside`; this one is not
        resolved on the filesystem, which cost an admission's activities 0.6 ms of the worker's event loop."""
        return self.root / directory_name(owner) / f"{directory_name(helper_id)}.{int(seq)}"

    def inside(self, path: Path) -> Path:
        """`path`, if it lies inside the root once resolved; ValueError otherwise (nothing is touched)."""
        root = self.root.resolve()
        resolved = path.resolve()
        if resolved == root or root not in resolved.parents:
            raise ValueError(f"{path} is outside the results root {self.root}")
        return path

    def write_outcome(self, directory: Path, text: str, record: dict[str, Any]) -> None:
        """Write both files atomically (temp file, then rename), so a reader never sees half an outcome."""
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(directory / OUTCOME_TEXT, text)
        _write_atomically(directory / OUTCOME_JSON, json.dumps(record, ensure_ascii=False, indent=2))

    def write_session(self, directory: Path, snapshot: dict[str, Any]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(directory / SESSION_JSON, json.dumps(snapshot, ensure_ascii=False))

    def read_session(self, directory: Path) -> dict[str, Any] | None:
        try:
            loaded = json.loads((directory / SESSION_JSON).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else None

    def read_outcome(self, directory: Path) -> dict[str, Any] | None:
        try:
            loaded = json.loads((directory / OUTCOME_JSON).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else None

    def read_text(self, directory: Path) -> str | None:
        try:
            return (directory / OUTCOME_TEXT).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def remove(self, directory: Path) -> bool:
        """Remove a result directory; False (and a log line) when it could not be removed. A path outside the
        root (a row from another store, a crafted input) is never removed."""
        try:
            self.inside(directory)
        except ValueError as error:
            log.error("refused to remove %s", error)
            return False
        try:
            shutil.rmtree(directory)
        except FileNotFoundError:
            return True
        except OSError as error:
            log.warning("could not remove result directory %s: %s; the orphan sweep will retry", directory, error)
            return False
        return True

    def orphans(self, known: set[Path], older_than: float = 0) -> list[Path]:
        """Directories no row points at and not modified for `older_than` seconds."""
        if not self.root.exists():
            return []
        known = {path.resolve() for path in known}  # rows may hold relative paths (the default root is)
        cutoff = time.time() - older_than
        return [
            directory
            for directory in self._directories()
            if directory.resolve() not in known and directory.stat().st_mtime <= cutoff
        ]

    def sweep_orphans(self, known: set[Path], older_than: float = 0) -> list[Path]:
        """Remove the orphans; returns those removed. Refuses (removes nothing, logs an error) when orphans
        are the majority of more than a handful: a worker pointed at the wrong (or an empty) store would see
        every directory as an orphan."""
        orphans = self.orphans(known, older_than)
        total = self.count()
        if len(orphans) > SWEEP_SANITY_MINIMUM and len(orphans) > total * SWEEP_SANITY_SHARE:
            log.error(
                "orphan sweep refused: %d of %d result directories have no row; is this the right store?",
                len(orphans),
                total,
            )
            return []
        return [directory for directory in orphans if self.remove(directory)]

    def count(self) -> int:
        return sum(1 for _ in self._directories()) if self.root.exists() else 0

    def _directories(self) -> list[Path]:
        return [
            directory
            for owner_dir in self.root.iterdir()
            if owner_dir.is_dir()
            for directory in owner_dir.iterdir()
            if directory.is_dir()
        ]


def _write_atomically(path: Path, content: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)
