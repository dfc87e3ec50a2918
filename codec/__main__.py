"""`python -m codec serve` runs the codec server; `python -m codec key` prints a new key."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from codec.auth import AuthConfigError, Authorizer, auth_settings, startup_refusal
from codec.encryption import CodecError, codec_from, new_key
from codec.server import create_app
from config.settings import Settings, SettingsError

log = logging.getLogger("codec")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m codec")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve /decode and /encode for the Web UI and the CLI")
    serve.add_argument("--host", help="default HELPER_CODEC_HOST or 127.0.0.1")
    serve.add_argument("--port", type=int, help="default HELPER_CODEC_PORT or 8330")
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
        settings = Settings.from_env()
        # The codec server only shows payloads: one written in clear is shown as it is.
        codec = codec_from(settings.codec_keys, settings.codec_key_id, allow_plaintext=True)
        auth = auth_settings(settings.codec)
    except (SettingsError, CodecError, AuthConfigError) as error:
        sys.exit(str(error))
    if codec is None:
        sys.exit("HELPER_CODEC_KEYS is not set: there is nothing to decode with")
    host = arguments.host or settings.codec.host
    refusal = startup_refusal(auth, host)
    if refusal is not None:
        sys.exit(refusal)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not auth.any_credential:
        log.warning("no HELPER_CODEC_TOKEN and no OIDC: anyone who can reach %s may read payloads", host)
    app = create_app(
        codec,
        allowed_origins=arguments.origin or settings.codec.origin_list,
        authorizer=Authorizer(auth),
        max_body_bytes=settings.codec.max_body_bytes,
    )
    uvicorn.run(app, host=host, port=arguments.port or settings.codec.port, log_level="warning")


if __name__ == "__main__":
    main()
