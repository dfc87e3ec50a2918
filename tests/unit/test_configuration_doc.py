"""The variables tables (docs/configuration.md, and the codec server's in docs/codec-server.md) against the settings
tree: every variable the tree reads has a row that shows its default, and no row names a variable nobody reads."""

from __future__ import annotations

import re
from pathlib import Path

from config.settings import TEMPORAL_CLIENT_VARIABLES, tree_variables

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "docs" / "configuration.md", ROOT / "docs" / "codec-server.md")
NAME = re.compile(r"`([A-Z][A-Z0-9_]*)`")


def documented() -> list[tuple[set[str], str]]:
    """Each table row that names variables: the variables of its first cell and its second cell (the default)."""
    rows = []
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if line.startswith("| `") and len(cells) >= 3 and (names := set(NAME.findall(cells[0]))):
                rows.append((names, cells[1]))
    return rows


def renderings(default: object) -> set[str]:
    if isinstance(default, bool):
        return {"true", "yes"} if default else {"false", "no"}
    if isinstance(default, int):
        return {str(default), f"{default:,}"}
    if isinstance(default, tuple):  # a comma-separated list
        return {",".join(str(item) for item in default)}
    return {str(default)}


def test_every_variable_of_the_tree_is_documented_with_its_default() -> None:
    rows = documented()
    missing, wrong = [], []
    for variable, default in tree_variables():
        cells = [cell for names, cell in rows if variable in names]
        if not cells:
            missing.append(variable)
        elif default is not None:
            wrong += [
                f"{variable}: {cell!r} lacks {default!r}" for cell in cells if not renderings(default) & _values(cell)
            ]
    assert not missing, f"not in the tables of docs/configuration.md or docs/codec-server.md: {missing}"
    assert not wrong, wrong


def test_the_tables_name_no_variable_the_tree_does_not_read() -> None:
    read = {variable for variable, _ in tree_variables()} | set(TEMPORAL_CLIENT_VARIABLES)
    named = set().union(*(names for names, _ in documented()))
    assert named - read == set()


def test_the_tree_names_each_variable_once() -> None:
    variables = [variable for variable, _ in tree_variables()]
    assert len(variables) == len(set(variables)) > 60


def _values(cell: str) -> set[str]:
    """What a default cell says: its backticked values whole, and its numbers (`2,700,000`) and words."""
    return set(re.findall(r"`([^`]+)`", cell)) | set(re.findall(r"\d{1,3}(?:,\d{3})+|[\w.:/+-]+", cell))
