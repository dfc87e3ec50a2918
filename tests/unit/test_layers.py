"""The layers' import rules. Observability is a leaf: every layer may call it, and it imports none of the project's
modules (only the standard library, prometheus_client, opentelemetry and the Temporal SDK), so no import circle runs
through it. Product code uses the Temporal SDK's public API only: an SDK upgrade may change any private part."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {"observability", "prometheus_client", "opentelemetry", "temporalio"}
# Scanned: everything but the tests and build outputs (the product, the reference services and the tools).
NOT_PRODUCT = {".venv", "tests", "build", "dist"}


def product_files() -> list[Path]:
    return [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if not NOT_PRODUCT & set(path.relative_to(ROOT).parts[:1]) and "site-packages" not in path.parts
    ]


def imported_names(path: Path) -> set[str]:
    """Every dotted name an import in `path` brings in: modules, and `module.name` for `from module import name`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


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


def test_product_code_imports_no_private_part_of_the_temporal_sdk() -> None:
    private = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in product_files()
        for name in imported_names(path)
        if name.split(".")[0] == "temporalio" and any(part.startswith("_") for part in name.split("."))
    }
    assert not private, sorted(private)
    assert len(product_files()) > 50, "the scan must see the product's modules"
