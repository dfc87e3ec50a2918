"""Observability is a leaf: every layer may call it, and it imports none of the project's modules (only the
standard library, prometheus_client, opentelemetry and the Temporal SDK), so no import circle runs through it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {"observability", "prometheus_client", "opentelemetry", "temporalio"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_observability_imports_nothing_of_the_project() -> None:
    strays = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "observability").glob("*.py"))
        for name in imported_modules(path)
        if name.split(".")[0] not in ALLOWED | sys.stdlib_module_names
    }
    assert not strays, sorted(strays)
