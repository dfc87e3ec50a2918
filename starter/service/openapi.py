"""Print the service's OpenAPI document: `python -m starter.service.openapi > docs/api/openapi.json`.

The document is exactly what the service serves at `/openapi.json`; building the app connects to nothing.
`--check FILE` exits 1 when FILE differs, so a stale copy in docs/ is noticed (tests/unit/test_api_openapi.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from config.settings import Settings
from starter.service.app import create_app, openapi_text
from starter.service.settings import ServiceSettings

DOCS_COPY = Path(__file__).resolve().parents[2] / "docs" / "api" / "openapi.json"


def openapi_document() -> dict[str, Any]:
    return create_app(Settings(), ServiceSettings()).openapi()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m starter.service.openapi", description=__doc__)
    parser.add_argument("--check", type=Path, metavar="FILE", help="compare with FILE instead of printing")
    arguments = parser.parse_args(argv)
    text = openapi_text(openapi_document())
    if arguments.check is None:
        sys.stdout.buffer.write(text.encode("utf-8"))
        return 0
    if not arguments.check.is_file() or arguments.check.read_text(encoding="utf-8") != text:
        print(f"{arguments.check} is stale: run python -m starter.service.openapi > {arguments.check}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
