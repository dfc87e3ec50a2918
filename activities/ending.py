"""A helper's ending as one local activity: write the outcome, hand the row and slot back, reset the session.

Each local activity costs the helper workflow an activation and a marker, so the three steps that follow every
outcome run in one (bench.helper_rate). They keep their order (R19, then R8, then R20), and a retry of the whole
(the notice failed, the worker died) repeats nothing that matters: the same outcome at the same generation,
a notice the coordinator has already taken (`domain.book.apply_finished`), a reset of a session that is gone.
Only the reset's first try runs here; when it fails, the workflow runs `reset_session`, which retries it and
parks the session as always.
"""

from __future__ import annotations

from temporalio import activity

from activities.notices import tell_finished
from activities.rows import RowActivities
from activities.session import SessionActivities
from domain.activity_io import HandBack, HandedBack, TellFinished


class EndingActivities:
    def __init__(self, rows: RowActivities, session: SessionActivities) -> None:
        self.rows = rows
        self.session = session

    @activity.defn(name="finalize_and_hand_back")
    async def finalize_and_hand_back(self, hand_back: HandBack) -> HandedBack:
        finalized = await self.rows.finalize_outcome(hand_back.final)
        notice, ref = hand_back.notice, hand_back.reset
        if finalized.already is not None:  # the outcome written first is the one the coordinator hears of
            notice = notice.model_copy(update={"kind": finalized.already.kind})
            ref = ref.model_copy(update={"outcome_kind": finalized.already.kind}) if ref is not None else None
        await tell_finished(TellFinished(owner=hand_back.final.row.owner, notice=notice))
        reset = ref is not None and await self.session.reset_once(ref)
        return HandedBack(finalized=finalized, reset=reset)
