"""The task a follow-up's core session gets when the core cannot continue the earlier session itself.

A core that advertises `continue_from` carries the earlier conversation on; any other core gets a new session
whose task holds the earlier outcome's full text and the owner's answer, so the follow-up still has the
context. The earlier text is capped so the task stays bounded however long that outcome was.
"""

from __future__ import annotations

from typing import Final

from domain.outcome import OutcomeKind
from domain.texts import text

# The earlier outcome's text carried in the task, at most (its beginning: the message, then the question or
# the authorization asked for, then the actions).
CARRIED_CONTEXT_MAX_CHARS: Final = 40_000
# The outcomes that wait for the owner, and so may have expired unanswered.
EXPIRING: Final = frozenset({OutcomeKind.QUESTION.value, OutcomeKind.AUTHORIZATION.value})


def carried_task(
    *,
    language: str,
    earlier_id: str,
    earlier_kind: OutcomeKind | None,
    earlier_text: str | None,
    answer: str,
    expired: bool = False,
) -> str:
    """The owner's answer with the earlier outcome it answers, in the owner's language. An earlier wait that expired
    is said to have expired unanswered, so the model is never told that it was denied (R54)."""
    if earlier_text is None or not earlier_text.strip():
        return text("follow_up.context_gone", language, earlier=earlier_id, answer=answer)
    context = earlier_text
    if len(context) > CARRIED_CONTEXT_MAX_CHARS:
        context = context[:CARRIED_CONTEXT_MAX_CHARS] + "\n" + text("follow_up.context_cut", language)
    kind = earlier_kind.value if earlier_kind is not None else "partial"
    ended_with = f"follow_up.ended_with.{kind}" + (".expired" if expired and kind in EXPIRING else "")
    return text(
        "follow_up.task",
        language,
        earlier=earlier_id,
        ended_with=text(ended_with, language),
        context=context,
        answer=answer,
    )
