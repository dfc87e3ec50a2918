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


def carried_task(
    *, language: str, earlier_id: str, earlier_kind: OutcomeKind | None, earlier_text: str | None, answer: str
) -> str:
    """The owner's answer with the earlier outcome it answers, in the owner's language."""
    if earlier_text is None or not earlier_text.strip():
        return text("follow_up.context_gone", language, earlier=earlier_id, answer=answer)
    context = earlier_text
    if len(context) > CARRIED_CONTEXT_MAX_CHARS:
        context = context[:CARRIED_CONTEXT_MAX_CHARS] + "\n" + text("follow_up.context_cut", language)
    kind = earlier_kind.value if earlier_kind is not None else "partial"
    return text(
        "follow_up.task",
        language,
        earlier=earlier_id,
        ended_with=text(f"follow_up.ended_with.{kind}", language),
        context=context,
        answer=answer,
    )
