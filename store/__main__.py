"""`python -m store migrate`: bring the configured store's schema up to date (run once per release)."""

from __future__ import annotations

import asyncio
import sys

from config.settings import Settings
from store.database import create_engine, migrate


async def _migrate(url: str) -> None:
    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def main() -> int:
    if sys.argv[1:] != ["migrate"]:
        print("usage: python -m store migrate   (uses HELPER_STORE_URL)", file=sys.stderr)
        return 2
    url = Settings.from_env().store_url
    asyncio.run(_migrate(url))
    print(f"store schema is current at {url.split('@')[-1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
