"""`python -m codec serve` runs the codec server; `python -m codec key` prints a new key."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import uvicorn

from codec.auth import AuthConfigError, Authorizer, auth_settings, startup_refusal
from codec.encryption import CodecError, codec_from, new_key
from codec.server import create_app
from config import help as help_text
from config.settings import Settings, SettingsError, tree_variables

log = logging.getLogger("codec")


EXIT_CODES = (
    (0, "stopped (SIGTERM or Ctrl-C); `key`: the key is printed"),
    (1, "serve refused to start: no keys, a bad variable or an unsafe listener (the message says which)"),
    (2, "the command line is wrong"),
)


def main(argv: Sequence[str] | None = None) -> None:
    serve_help = "\n\n".join(
        [
            help_text.environment(
                tree_variables(only=("codec_keys", "codec_key_id", "codec")), meanings="docs/codec-server.md"
            ),
            help_text.exit_codes(EXIT_CODES),
        ]
    )
    parser = argparse.ArgumentParser(
        prog="python -m codec",
        description=help_text.paragraph(
            "The payload codec: the server the Temporal Web UI and CLI decode through, and new keys "
            "(docs/codec-server.md)."
        ),
        epilog=serve_help,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve /decode and /encode for the Web UI and the CLI",
        description="Serve /decode and /encode for the Web UI and the CLI until SIGTERM or Ctrl-C.",
        epilog=serve_help,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", help="default HELPER_CODEC_HOST or 127.0.0.1")
    serve.add_argument("--port", type=int, help="default HELPER_CODEC_PORT or 8330")
    serve.add_argument(
        "--origin",
        action="append",
        default=None,
        help="a Web UI origin allowed to call it (repeatable); default HELPER_CODEC_ORIGINS or the local UI",
    )
    commands.add_parser(
        "key",
        help="print a new random key (base64, 32 bytes)",
        description="Print a new random key (base64, 32 bytes) for HELPER_CODEC_KEYS; reads no variable.",
        epilog=help_text.exit_codes(((0, "the key is printed"), EXIT_CODES[2])),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    arguments = parser.parse_args(argv)
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
