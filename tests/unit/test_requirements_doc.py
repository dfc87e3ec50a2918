"""docs/requirements.md lists every requirement id that the code, tests and docs tracked by git cite (`R12`, and
each id inside a range such as `R6-R8`), each id once, from R1 with no gap: an id never points at nothing."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "requirements.md"
# Recorded histories are base64 payloads, data/ is local state: neither is anyone's prose.
SKIPPED = ("tests/replay/histories/", "data/", ".venv/", "node_modules/")
UNWALKED = ("node_modules", "__pycache__")
# An id is `R` and a number without leading zero, standing alone: not inside a word (`SECP256R1`), a path or a
# dotted name (`x/R1`, `x.R1`), a version (`R1.2`) or a hyphenated token (`X-R1`, `R1-beta`).
_ALONE_BEFORE = r"(?<![\w./\\-])"
_ALONE_AFTER = r"(?![\w-]|\.\d)"
CITED = re.compile(_ALONE_BEFORE + r"R([1-9]\d{0,2})" + _ALONE_AFTER)
# `R15-R17` and `R6–R8` cite every id in between too.
RANGE = re.compile(_ALONE_BEFORE + r"R([1-9]\d{0,2}) ?[-–] ?R([1-9]\d{0,2})" + _ALONE_AFTER)
LISTED = re.compile(r"^- \*\*R(\d+)\*\* \S", re.MULTILINE)


def cited_ids(text: str) -> set[int]:
    ids = {int(number) for number in CITED.findall(text)}
    for first, last in RANGE.findall(text):
        low, high = sorted((int(first), int(last)))
        ids.update(range(low, high + 1))
    return ids


def tracked_files() -> list[Path]:
    """The files git tracks; without git (an exported tree) the files under the root but for hidden folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=10).stdout
        names = [name for name in out.decode().split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        names = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [name for name in dirs if not name.startswith(".") and name not in UNWALKED]
            names += [os.path.relpath(os.path.join(folder, name), ROOT) for name in files]
    return [ROOT / name for name in names if not name.startswith(SKIPPED)]


def citations() -> dict[int, list[str]]:
    """Each cited id and the files that cite it."""
    where: dict[int, list[str]] = {}
    for path in tracked_files():
        # The doc and this file's own examples are checked by the tests below.
        if path in (DOC, Path(__file__).resolve()) or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        for number in cited_ids(text):
            where.setdefault(number, []).append(str(path.relative_to(ROOT)))
    return where


def listed_ids() -> list[int]:
    return [int(number) for number in LISTED.findall(DOC.read_text(encoding="utf-8"))]


def test_every_cited_id_is_listed() -> None:
    where = citations()
    # A scan that found next to nothing (no git, a broken pattern) would pass vacuously.
    assert sum(len(files) for files in where.values()) > 500, "the scan found almost no citations"
    missing = {f"R{number}": files[:3] for number, files in sorted(where.items()) if number not in set(listed_ids())}
    assert not missing, f"cited but not in docs/requirements.md: {missing}"


def test_each_id_is_listed_once_from_r1_without_a_gap() -> None:
    listed = listed_ids()
    twice = sorted(number for number, count in Counter(listed).items() if count > 1)
    assert not twice, f"listed more than once in docs/requirements.md: {['R' + str(n) for n in twice]}"
    assert sorted(listed) == list(range(1, len(listed) + 1)), "docs/requirements.md skips an id"
    assert len(listed) >= 57


def test_the_doc_cites_only_ids_it_lists() -> None:
    """Its intro and its lines (`as R7 says`) point at listed ids too."""
    assert cited_ids(DOC.read_text(encoding="utf-8")) <= set(listed_ids())


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ('"""R12: the work counter."""', {12}),
        ("(R2, R3, R5).", {2, 3, 5}),
        ("| R6–R8 |", {6, 7, 8}),
        ("(R7, R13, R15-R17, R21)", {7, 13, 15, 16, 17, 21}),
        ("R9 - R11 and R5-R4", {9, 10, 11, 4, 5}),
        ("the promise of R35 is broken; R12's formula", {35, 12}),
        ("ec.SECP256R1() and R2D2 and xR1", set()),
        ("a path a/R12, a name m.R12, a version R1.2, X-R1 and R1-beta", set()),
        ("R0 and R07 and R1000", set()),
    ],
)
def test_what_counts_as_a_citation(text: str, ids: set[int]) -> None:
    assert cited_ids(text) == ids
