"""Run the reference core: `python -m reference_core --host 127.0.0.1 --port 8310 --db data/core.sqlite3`.

Each option falls back to an environment variable: REFERENCE_CORE_HOST, REFERENCE_CORE_PORT,
REFERENCE_CORE_DB, REFERENCE_CORE_LOG_LEVEL.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from reference_core.app import create_app


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="reference-core", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("REFERENCE_CORE_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("REFERENCE_CORE_PORT", "8310")))
    parser.add_argument(
        "--db",
        type=Path,
        default=Path(os.environ.get("REFERENCE_CORE_DB", "data/core.sqlite3")),
        help="SQLite file with the sessions (created if missing)",
    )
    parser.add_argument("--log-level", default=os.environ.get("REFERENCE_CORE_LOG_LEVEL", "info"))
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = parse_arguments(argv)
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(arguments.db)
    uvicorn.run(app, host=arguments.host, port=arguments.port, log_level=arguments.log_level)


if __name__ == "__main__":
    main()
