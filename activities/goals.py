"""The activity of a Goal check: admit the check as a helper, exactly as Iva would (R30)."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from config.settings import Settings
from domain.messages.activities import GoalCheck, GoalCheckResult
from protocol.deadlines import reply_by
from protocol.errors import Accepted, Busy, ErrorType, HelperRefused, InvalidRequest, Unavailable
from protocol.names import START_GOAL_CHECK
from protocol.update_senders import admit


class GoalActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=START_GOAL_CHECK)
    async def start_goal_check(self, check: GoalCheck) -> GoalCheckResult:
        """A refused check (no place left for it) is a result, not an error: the next one may fit."""
        request = check.goal.check_request(check.helper_id)
        try:
            admission = await admit(activity.client(), self.settings, request, reply_by(self.settings))
        except HelperRefused as refusal:
            return GoalCheckResult(
                helper_id=check.helper_id,
                admitted=False,
                status="refused",
                refusal_code=refusal.code,
                message=refusal.message,
            )
        except InvalidRequest as error:
            raise ApplicationError(error.message, type=ErrorType.INVALID_GOAL, non_retryable=True) from None
        except Accepted:
            # Accepted by the coordinator, so it will be admitted; its place is not known yet.
            return GoalCheckResult(helper_id=check.helper_id, admitted=True, status="accepted")
        except (Unavailable, Busy) as error:
            raise ApplicationError(error.message, type=ErrorType.UNAVAILABLE) from None
        return GoalCheckResult(helper_id=check.helper_id, admitted=True, status=str(admission.status))
