"""`python -m store migrate`: bring the configured store's schema up to date (run once per release)."""

from __future__ import annotations

import asyncio
import sys

from config.settings import Settings
from config.store_address import StoreAddress
from store.database import create_engine, migrate


async def _migrate(address: StoreAddress) -> None:
    engine = create_engine(address, creates=True)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def main() -> int:
    if sys.argv[1:] != ["migrate"]:
        print("usage: python -m store migrate   (uses HELPER_STORE_URL)", file=sys.stderr)
        return 2
    address = Settings.from_env().store
    asyncio.run(_migrate(address))
    print(f"store schema is current at {address.described}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
