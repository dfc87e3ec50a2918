"""Run the reference core: `python -m reference.core --host 127.0.0.1 --port 8310 --db data/core.sqlite3`.

Each option falls back to an environment variable: REFERENCE_CORE_HOST, REFERENCE_CORE_PORT,
REFERENCE_CORE_DB, REFERENCE_CORE_LOG_LEVEL. The model `scripted` is always offered. An
OpenAI-compatible chat-completions API is offered as `openai:<model>` when a base URL is set:
REFERENCE_CORE_OPENAI_BASE_URL, REFERENCE_CORE_OPENAI_API_KEY, REFERENCE_CORE_OPENAI_MODEL (one name or
several, comma-separated), REFERENCE_CORE_OPENAI_TIMEOUT_S and REFERENCE_CORE_OPENAI_MAX_RETRIES, or the
matching --openai-* options. Prefer the variable for the key: options are visible to other users.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import uvicorn

from reference.core.app import create_app
from reference.core.model_catalog import default_models
from reference.core.openai_model import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MAX_RETRIES,
    ENV_MODEL,
    ENV_TIMEOUT_S,
    OpenAIConfig,
    openai_config,
)

logger = logging.getLogger("reference.core")

EXIT_CODES = """\
Exit codes:
  0   stopped (SIGTERM or Ctrl-C)
  1   the port could not be bound
  2   the command line, or the OpenAI-compatible model's settings (a REFERENCE_CORE_OPENAI_* number that is not
      a number among them), are wrong"""


def _number(kind: type[float] | type[int], variable: str) -> Callable[[str], float | int]:
    """An argparse type for a flag whose default is the variable's text: argparse converts a text default only once
    the arguments are parsed, so --help never fails on the variable's value, and an error names both."""

    def convert(value: str) -> float | int:
        try:
            return kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a {kind.__name__} (the flag or {variable})") from None

    return convert


def parse_arguments(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="reference-core",
        description=__doc__,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default=env.get("REFERENCE_CORE_HOST", "127.0.0.1"))
    # A text default: argparse converts it once parsed, so --help never fails on the variable's value.
    parser.add_argument("--port", type=int, default=env.get("REFERENCE_CORE_PORT", "8310"))
    parser.add_argument(
        "--db",
        type=Path,
        default=Path(env.get("REFERENCE_CORE_DB", "data/core.sqlite3")),
        help="SQLite file with the sessions (created if missing)",
    )
    parser.add_argument("--log-level", default=env.get("REFERENCE_CORE_LOG_LEVEL", "info"))
    openai = parser.add_argument_group("OpenAI-compatible model (offered only when a base URL is set)")
    openai.add_argument(
        "--openai-base-url",
        default=env.get(ENV_BASE_URL) or None,
        help=f"e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1 (env {ENV_BASE_URL})",
    )
    openai.add_argument(
        "--openai-model",
        default=env.get(ENV_MODEL) or None,
        help=f"model name(s), comma-separated; each is offered as openai:<name> (env {ENV_MODEL})",
    )
    openai.add_argument(
        "--openai-api-key", default=env.get(ENV_API_KEY) or None, help=f"bearer key; prefer env {ENV_API_KEY}"
    )
    openai.add_argument(
        "--openai-timeout-s",
        type=_number(float, ENV_TIMEOUT_S),
        default=env.get(ENV_TIMEOUT_S, "").strip() or None,
        help=f"bound on each model call attempt, default 120 (env {ENV_TIMEOUT_S})",
    )
    openai.add_argument(
        "--openai-max-retries",
        type=_number(int, ENV_MAX_RETRIES),
        default=env.get(ENV_MAX_RETRIES, "").strip() or None,
        help=f"further attempts after 408, 429, 5xx or a timeout, default 2 (env {ENV_MAX_RETRIES})",
    )
    arguments = parser.parse_args(argv)
    try:
        arguments.openai = openai_config(
            arguments.openai_base_url,
            arguments.openai_model,
            arguments.openai_api_key,
            arguments.openai_timeout_s,
            arguments.openai_max_retries,
        )
    except ValueError as error:
        parser.error(str(error))
    return arguments


def main(argv: Sequence[str] | None = None) -> None:
    arguments = parse_arguments(argv)
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config: OpenAIConfig | None = arguments.openai
    models = default_models(config)
    if config is not None:
        logger.info("offering %s at %s", ", ".join(config.catalog_names), config.base_url)
    app = create_app(arguments.db, models)
    uvicorn.run(app, host=arguments.host, port=arguments.port, log_level=arguments.log_level)


if __name__ == "__main__":
    main()
