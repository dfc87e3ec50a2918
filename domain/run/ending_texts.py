"""The owner's sentence for each way a helper ends (R32): plain words, durations as people say them.

Technical detail (HTTP paths, status codes, session ids) goes to logs and the workflow's history, never
into what the owner reads.
"""

from __future__ import annotations

from domain.durations import TOKENS, say_count, say_duration
from domain.limits import Limits
from domain.run.ending import Explanation
from domain.texts import text


def explain(explanation: Explanation, language: str, limits: Limits, silence_ms: int = 0) -> str:
    """The explanation that leads the outcome text; empty when the core's own outcome speaks for itself."""
    match explanation:
        case Explanation.NONE:
            return ""
        case Explanation.CLOSED:
            return text("outcome.closed", language)
        case Explanation.DEADLINE:
            return text("stop.deadline", language, deadline=say_duration(limits.deadline_ms, language))
        case Explanation.WORK_CEILING:
            return text("stop.work_ceiling", language, ceiling=say_count(limits.ceiling_tokens, language, TOKENS))
        case Explanation.HARD_CEILING:
            return text(
                "stop.hard_ceiling",
                language,
                grace=say_duration(limits.grace_ms, language),
                deadline=say_duration(limits.deadline_ms, language),
            )
        case Explanation.TURN_INTERRUPTED:
            return text("outcome.interrupted", language, reason=text("reason.turn_interrupted", language))
        case Explanation.SESSION_LOST:
            return text("outcome.interrupted", language, reason=text("reason.session_lost", language))
        case Explanation.CORE_REJECTED:
            return text("outcome.failed", language, reason=text("reason.core_rejected", language))
        case Explanation.NO_START:
            return text("outcome.failed", language, reason=text("reason.core_no_answer_start", language))
        case Explanation.CORE_BAD_ANSWERS:
            return text("outcome.failed", language, reason=text("reason.core_bad_answers", language))
        case Explanation.CORE_SILENT:
            duration = say_duration(silence_ms, language)
            return text("outcome.failed", language, reason=text("reason.core_silent", language, duration=duration))
