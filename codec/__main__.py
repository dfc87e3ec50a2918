"""`python -m codec serve` runs the codec server; `python -m codec key` prints a new key."""

from __future__ import annotations

import argparse
import logging
import os
import sys

import uvicorn

from codec.auth import AuthConfigError, Authorizer, auth_settings_from_env, startup_refusal
from codec.encryption import CodecError, codec_from, new_key
from codec.server import DEFAULT_MAX_BODY_BYTES, create_app

log = logging.getLogger("codec")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m codec")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve /decode and /encode for the Web UI and the CLI")
    serve.add_argument("--host", default=os.environ.get("HELPER_CODEC_HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=int(os.environ.get("HELPER_CODEC_PORT", "8330")))
    serve.add_argument(
        "--origin",
        action="append",
        default=None,
        help="a Web UI origin allowed to call it (repeatable); default HELPER_CODEC_ORIGINS or the local UI",
    )
    commands.add_parser("key", help="print a new random key (base64, 32 bytes)")
    arguments = parser.parse_args()
    if arguments.command == "key":
        print(new_key())
        return
    try:
        # The codec server only shows payloads: one written in clear is shown as it is.
        codec = codec_from(
            os.environ.get("HELPER_CODEC_KEYS"), os.environ.get("HELPER_CODEC_KEY_ID"), allow_plaintext=True
        )
    except CodecError as error:
        sys.exit(str(error))
    if codec is None:
        sys.exit("HELPER_CODEC_KEYS is not set: there is nothing to decode with")
    origins = arguments.origin or os.environ.get(
        "HELPER_CODEC_ORIGINS", "http://127.0.0.1:8233,http://localhost:8233"
    ).split(",")
    try:
        settings = auth_settings_from_env(os.environ)
        max_body_bytes = int(os.environ.get("HELPER_CODEC_MAX_BODY_BYTES") or DEFAULT_MAX_BODY_BYTES)
    except AuthConfigError as error:
        sys.exit(str(error))
    except ValueError:
        sys.exit("HELPER_CODEC_MAX_BODY_BYTES must be a whole number of bytes")
    if max_body_bytes <= 0:
        sys.exit("HELPER_CODEC_MAX_BODY_BYTES must be positive")
    refusal = startup_refusal(settings, arguments.host)
    if refusal is not None:
        sys.exit(refusal)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not settings.any_credential:
        log.warning("no HELPER_CODEC_TOKEN and no OIDC: anyone who can reach %s may read payloads", arguments.host)
    app = create_app(codec, allowed_origins=origins, authorizer=Authorizer(settings), max_body_bytes=max_body_bytes)
    uvicorn.run(app, host=arguments.host, port=arguments.port, log_level="warning")


if __name__ == "__main__":
    main()
