"""When a session kept for a follow-up is reset (R20).

A session whose outcome waits for the owner (a question, an authorization wait, a partial outcome) is kept
instead of reset when its helper finalizes, so a follow-up can continue it (on a core that offers
`continue_from`). It is reset, as cleanup, once nothing can need it any more.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from domain.rows import HelperRow, RowState

# The longest a follow-up can still come: the row is kept 24 h after delivery (HELPER_KEEP_MS), and an
# admitted follow-up waits for a slot behind at most two others' 47-minute hard ceilings. Past this, a kept
# session is reset whatever its row says.
KEPT_AT_MOST: Final = timedelta(hours=26)


def reset_reason(
    kept_at: datetime, seq: int, row: HelperRow | None, follow_up: HelperRow | None, now: datetime
) -> str | None:
    """Why the kept session of `row` (admission `seq`) should be reset now, or None to keep it."""
    if row is None or row.seq != seq:
        return "its row is gone"
    if row.state is RowState.CLOSED:
        return "its row was closed"
    if row.state is RowState.EXPIRED:
        return "its wait expired unanswered"
    if row.followed_up_by is not None:
        if follow_up is None:
            return "its follow-up is gone"
        if follow_up.session_id is not None or not follow_up.state.is_open:
            return "its follow-up has its own session"
    if now - kept_at >= KEPT_AT_MOST:
        return "it was kept for the longest a follow-up may wait"
    return None
