"""Run the reference chat: `python -m reference.chat --host 127.0.0.1 --port 8320 [--state-file F] [--runtime-url U]`.

Each option falls back to an environment variable: REFERENCE_CHAT_HOST, REFERENCE_CHAT_PORT,
REFERENCE_CHAT_STATE_FILE, REFERENCE_CHAT_LOG_LEVEL, REFERENCE_CHAT_RUNTIME_URL, REFERENCE_CHAT_RUNTIME_TOKEN.
With a runtime URL the chat tells the runtime when an owner's chat turns idle or the chat answers again.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from reference.chat.app import create_app

EXIT_CODES = """\
Exit codes:
  0   stopped (SIGTERM or Ctrl-C)
  1   the port could not be bound
  2   the command line is wrong"""


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="reference-chat",
        description=__doc__,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default=os.environ.get("REFERENCE_CHAT_HOST", "127.0.0.1"))
    # A text default: argparse converts it once parsed, so --help never fails on the variable's value.
    parser.add_argument("--port", type=int, default=os.environ.get("REFERENCE_CHAT_PORT", "8320"))
    state_file = os.environ.get("REFERENCE_CHAT_STATE_FILE")
    parser.add_argument(
        "--state-file",
        type=Path,
        default=Path(state_file) if state_file else None,
        help="JSON-lines file that keeps idle flags and event keys across restarts (default: memory only)",
    )
    parser.add_argument("--log-level", default=os.environ.get("REFERENCE_CHAT_LOG_LEVEL", "info"))
    parser.add_argument(
        "--runtime-url",
        default=os.environ.get("REFERENCE_CHAT_RUNTIME_URL") or None,
        help="the runtime's starter API, told when an owner's chat is idle, e.g. http://127.0.0.1:8340 "
        "(default: tell nobody)",
    )
    parser.add_argument(
        "--runtime-token",
        default=os.environ.get("REFERENCE_CHAT_RUNTIME_TOKEN") or None,
        help="the starter API's token (HELPER_API_TOKEN), sent as 'Authorization: Bearer <token>'; "
        "prefer the variable, which a process listing does not show (default: none)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = parse_arguments(argv)
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(arguments.state_file, runtime_url=arguments.runtime_url, runtime_token=arguments.runtime_token)
    uvicorn.run(app, host=arguments.host, port=arguments.port, log_level=arguments.log_level)


if __name__ == "__main__":
    main()
