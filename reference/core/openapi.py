"""Print the core's OpenAPI document: `python -m reference.core.openapi > docs/core-openapi.json`.

The document is exactly what the app serves at `/openapi.json` (the models offered do not change it).
`--check FILE` exits 1 when FILE differs, so a stale copy in docs/ is noticed.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contracts.openapi import print_or_check
from reference.core.app import create_app

DOCS_COPY = Path(__file__).resolve().parents[2] / "docs" / "core-openapi.json"


def openapi_document() -> dict[str, Any]:
    # Building the app opens nothing: the session store opens only when the app starts.
    with tempfile.TemporaryDirectory() as directory:
        return create_app(Path(directory) / "unused.sqlite3").openapi()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference.core.openapi", description=__doc__)
    parser.add_argument("--check", type=Path, metavar="FILE", help="compare with FILE instead of printing")
    arguments = parser.parse_args(argv)
    return print_or_check(openapi_document(), arguments.check, "python -m reference.core.openapi")


if __name__ == "__main__":
    raise SystemExit(main())
