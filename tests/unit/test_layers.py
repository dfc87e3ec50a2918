"""The layers' import rules. Observability is a leaf: every layer may call it, and it imports none of the project's
modules (only the standard library, prometheus_client, opentelemetry and the Temporal SDK), so no import circle runs
through it. Product code uses the Temporal SDK's public API only: an SDK upgrade may change any private part."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {"observability", "prometheus_client", "opentelemetry", "temporalio"}
# Scanned: every top-level folder and module but these and hidden ones (the product, the reference services, the
# tools); the virtual environment is never walked.
NOT_SCANNED = {"tests", "build", "dist", "data"}


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for entry in sorted(ROOT.iterdir()):
        if entry.name in NOT_SCANNED or entry.name.startswith("."):
            continue
        if entry.suffix == ".py":
            files.append(entry)
        elif entry.is_dir():
            files.extend(sorted(entry.rglob("*.py")))
    return files


def imported_names(path: Path) -> set[str]:
    """Every dotted name an absolute import in `path` brings in: modules, and `module.name` for `from module import
    name` (relative imports stay inside the project's own package)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_observability_imports_nothing_of_the_project() -> None:
    strays = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "observability").glob("*.py"))
        for name in imported_names(path)
        if name.split(".")[0] not in ALLOWED | sys.stdlib_module_names
    }
    assert not strays, sorted(strays)


def test_product_code_imports_no_private_part_of_the_temporal_sdk() -> None:
    files = scanned_files()
    assert len(files) > 50 and ROOT / "worker.py" in files, "the scan must see the product's modules"
    private = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        for name in imported_names(path)
        if name.split(".")[0] == "temporalio" and any(part.startswith("_") for part in name.split("."))
    }
    assert not private, sorted(private)
