"""Print the service's OpenAPI document: `python -m starter.service.openapi > docs/api/openapi.json`.

The document is exactly what the service serves at `/openapi.json`; building the app connects to nothing.
`--check FILE` exits 1 when FILE differs, so a stale copy in docs/ is noticed (tests/unit/test_api_service.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from config.settings import Settings
from contracts.openapi import print_or_check
from starter.service.app import create_app

DOCS_COPY = Path(__file__).resolve().parents[2] / "docs" / "api" / "openapi.json"


def openapi_document() -> dict[str, Any]:
    return create_app(Settings()).openapi()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m starter.service.openapi", description=__doc__)
    parser.add_argument("--check", type=Path, metavar="FILE", help="compare with FILE instead of printing")
    arguments = parser.parse_args(argv)
    return print_or_check(openapi_document(), arguments.check, "python -m starter.service.openapi")


if __name__ == "__main__":
    raise SystemExit(main())
