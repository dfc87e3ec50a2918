"""The OpenAPI documents committed in docs/ (the core's contract, the starter API): their committed form, and the
`--check` that notices a stale copy."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def render(document: dict[str, Any]) -> str:
    """The committed form: sorted keys, two-space indent, UTF-8, one trailing newline."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def print_or_check(document: dict[str, Any], check: Path | None, command: str) -> int:
    """Print the document, or, with `check`, exit 1 when that file is missing or differs from it; `command` is
    what regenerates the file."""
    text = render(document)
    if check is None:
        sys.stdout.buffer.write(text.encode("utf-8"))
        return 0
    if not check.is_file() or check.read_text(encoding="utf-8") != text:
        print(f"{check} is stale: run {command} > {check}", file=sys.stderr)
        return 1
    return 0
