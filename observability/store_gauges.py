"""The store-derived gauges: helpers by row state, helpers past their hard ceiling, and whether the store answers.

They are refreshed when Prometheus scrapes /metrics (health.py), not on a timer: no scrape, no query. Each
refresh is two small reads bounded by `timeout_s`; when the store does not answer in time the gauges keep
their last values and STORE_UP goes 0, so a scrape never hangs on the database. Refreshes closer together
than `min_interval_s` reuse the last count (several Prometheus replicas may scrape the same pod).

Every worker counts the whole store, so these gauges are the same on every replica: aggregate them with
max(), never sum().
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

from sqlalchemy import Table, func, select

from domain.limits import Limits
from domain.rows import RowState
from observability.metrics import HELPERS, HELPERS_PAST_HARD_CEILING, STORE_UP
from store.helper_store import HelperStore
from store.schema import HelperRowRecord

log = logging.getLogger(__name__)

rows: Final = cast(Table, HelperRowRecord.__table__)
# A helper still running this long after its hard ceiling is stuck (R35); shorter is the ceiling's own slack.
PAST_CEILING_MARGIN: Final = timedelta(minutes=1)


class StoreGauges:
    def __init__(
        self, store: HelperStore, task_queue: str, *, timeout_s: float = 2.0, min_interval_s: float = 1.0
    ) -> None:
        self.store = store
        self.task_queue = task_queue
        self.timeout_s = timeout_s
        self.min_interval_s = min_interval_s
        self._lock = asyncio.Lock()
        self._last_refresh = -float("inf")

    async def refresh(self) -> None:
        """Count the rows once (concurrent scrapes share it); never raises, never waits past `timeout_s`
        for the store (plus the wait for a refresh already under way, itself bounded the same)."""
        async with self._lock:
            if time.monotonic() - self._last_refresh < self.min_interval_s:
                return
            try:
                async with asyncio.timeout(self.timeout_s):
                    by_state, past_ceiling = await self._count(datetime.now(UTC))
            except Exception as error:  # a timeout, an unreachable or broken database: report it, keep values
                STORE_UP.set(0)
                log.warning("store gauges not refreshed: %s: %s", type(error).__name__, error)
            else:
                for state in RowState:
                    HELPERS.labels(state.value, self.task_queue).set(by_state.get(state.value, 0))
                HELPERS_PAST_HARD_CEILING.set(past_ceiling)
                STORE_UP.set(1)
            self._last_refresh = time.monotonic()

    async def _count(self, now: datetime) -> tuple[dict[str, int], int]:
        async with self.store.engine.connect() as connection:
            counted = await connection.execute(select(rows.c.state, func.count()).group_by(rows.c.state))
            by_state = {str(state): int(count) for state, count in counted.all()}
            # Only running rows can be past their ceiling; their limits (grace) live in a JSON column, so the
            # comparison is made here rather than in SQL that SQLite and PostgreSQL would spell differently.
            running = await connection.execute(
                select(rows.c.deadline_at, rows.c.limits).where(rows.c.state == RowState.RUNNING.value)
            )
            past = sum(1 for deadline_at, limits in running.all() if _past_ceiling(deadline_at, limits, now))
        return by_state, past


def _past_ceiling(deadline_at: datetime | None, limits: Any, now: datetime) -> bool:
    if deadline_at is None:  # running, but the session not opened yet: no deadline to be past
        return False
    if deadline_at.tzinfo is None:  # SQLite hands back naive UTC
        deadline_at = deadline_at.replace(tzinfo=UTC)
    grace_ms = Limits.model_validate(limits).grace_ms if isinstance(limits, dict) else Limits().grace_ms
    return deadline_at + timedelta(milliseconds=grace_ms) + PAST_CEILING_MARGIN < now
