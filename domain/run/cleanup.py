"""When a session whose cleanup reset failed is parked (R20).

After its outcome a session is reset, or kept for a follow-up and reset once nothing can need it. A reset that
fails is tried again by whoever runs that cleanup, and once the cleanup's budget is spent the session is parked:
listed for the hourly sweep, which tries it again until the core resets it or no longer knows it. One rule for
every cleanup, each with its budget counted the way its tries run:

- the helper's reset after its outcome: Temporal retries the reset activity with backoff for
  `workflows.options.RESET_BUDGET`, so the activity's failure is that budget spent, and the workflow parks the
  session when it sees it;
- the reset of a session found by its key after an unanswered create (R38): `FOUND_BY_KEY`, the attempts of the
  recovery activity; the slot waits for them, so they are few;
- a session kept for a follow-up: the hourly sweep tries it; `KEPT`, counted from when it was kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from domain.run.kept_sessions import KEPT_AT_MOST


@dataclass(frozen=True)
class Budget:
    """How much a cleanup tries a failing reset before it parks the session: attempts, time, or both."""

    attempts: int | None = None
    time: timedelta | None = None


# A session found by its key holds its helper's slot until it is stopped (R38): three attempts of the recovery
# (each a create, a cancel and a reset, backed off by the recovery's policy), then the slot passes on.
FOUND_BY_KEY: Final = Budget(attempts=3)
# A kept session whose reset keeps failing stays kept (the sweep tries it hourly) until it is this much older than
# a session may be kept.
KEPT: Final = Budget(time=2 * KEPT_AT_MOST)


def parks(budget: Budget, *, attempt: int = 1, tried_for: timedelta = timedelta(0)) -> bool:
    """Whether a failed reset parks its session now: its cleanup's budget is spent. `attempt` is the failed try
    (from 1), `tried_for` how long the cleanup has been trying; until then, the cleanup tries again."""
    out_of_attempts = budget.attempts is not None and attempt >= budget.attempts
    out_of_time = budget.time is not None and tried_for >= budget.time
    return out_of_attempts or out_of_time
