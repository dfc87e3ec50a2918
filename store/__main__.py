"""`python -m store migrate`: bring the configured store's schema up to date (run once per release)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from config import help as help_text
from config.settings import Settings, SettingsError, tree_variables
from config.store_address import StoreAddress
from store.database import create_engine, migrate

EXIT_CODES = (
    (0, "the store's schema is current"),
    (1, "the migration failed: the store could not be reached or changed (the message says why)"),
    (2, "invalid: the command line, or a variable's value (the message names it)"),
)


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; --help reads no variable and connects to nothing."""
    epilog = "\n\n".join(
        [
            help_text.environment(
                tree_variables(only=("store",)),
                notes=["A migration creates the store (a SQLite file and its folder) if it is not there."],
            ),
            help_text.exit_codes(EXIT_CODES),
        ]
    )
    parser = argparse.ArgumentParser(
        prog="python -m store",
        description="The helpers' store: its schema.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "migrate",
        help="bring the store's schema up to date (once per release, before its workers)",
        description="Bring the store's schema up to date: a no-op when it is current.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser.parse_args(argv)


async def _migrate(address: StoreAddress) -> None:
    engine = create_engine(address, creates=True)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    parse_arguments(argv)
    try:
        address = Settings.from_env().store
    except SettingsError as error:
        print(f"python -m store: {error}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_migrate(address))
    except Exception as error:
        print(
            address.scrubbed(f"python -m store: the migration of {address.described} failed: {error}"), file=sys.stderr
        )
        return 1
    print(f"store schema is current at {address.described}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
