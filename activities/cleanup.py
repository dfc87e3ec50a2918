"""The one reset of a session as cleanup (R20), for every activity that resets one: after the outcome, after a
recovery, a kept session, a parked one."""

from __future__ import annotations

from clients.core_client import CoreClient, CoreUnavailable, SessionNotFound


async def reset(core: CoreClient, session_id: str, timeout_s: float | None = None) -> bool:
    """Reset the session: True when the core reset it, False when it no longer knows it (lost, or reset already:
    nothing is left to clean up). Raises CoreError when the call fails or the core answers that it did not reset
    it; the caller's cleanup tries again or parks the session (`domain.run.cleanup.parks`)."""
    try:
        answer = await core.reset(session_id, timeout_s=timeout_s)
    except SessionNotFound:
        return False
    if not answer.reset:
        raise CoreUnavailable(f"the core did not reset session {session_id}")
    return True
