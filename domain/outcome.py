"""A helper's outcome (R18): its kind, the full text, the summary shown to the chat, actions, usage.

`compose_outcome_text` and `summarize` are pure so the finalizing activity and the tests agree on
exactly what the owner will read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from contracts.core_api import Action, QuestionChoices
from domain.boundary import GrantedAction
from domain.texts import text
from domain.work import Usage


class OutcomeKind(StrEnum):
    COMPLETED = "completed"
    PARTIAL = "partial"
    QUESTION = "question"
    AUTHORIZATION = "authorization"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CLOSED = "closed"


class Outcome(BaseModel):
    """The one finalized outcome of a helper, as its result directory keeps it (`outcome.json`); it never
    changes once written (R18, R19)."""

    owner: str
    helper_id: str
    seq: int
    goal_id: str | None = None
    kind: OutcomeKind
    summary: str
    explanation: str = Field(default="", description="Why the helper stopped, in the owner's language.")
    question: str | None = None
    choices: QuestionChoices | None = None
    authorization: str | None = None
    actions: list[Action] = Field(default_factory=list)
    refusals: list[str] = Field(default_factory=list)
    usage: Usage = Usage()
    model: str
    started_at: datetime | None = None
    finished_at: datetime


def summarize(full_text: str, limit: int, language: str) -> str:
    """At most `limit` characters; a longer text is cut at a word boundary and marked (R18)."""
    stripped = full_text.strip()
    if len(stripped) <= limit:
        return stripped
    mark = text("summary.cut_mark", language)
    if len(mark) >= limit:  # a limit with no room beside the mark: cut hard, the limit wins
        return stripped[:limit]
    room = limit - len(mark)
    cut = stripped[:room]
    boundary = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
    if boundary > room // 2:  # a word boundary that keeps most of the room
        cut = cut[:boundary]
    return cut.rstrip() + mark


def compose_outcome_text(
    *,
    kind: OutcomeKind,
    language: str,
    message: str,
    explanation: str = "",
    question: str | None = None,
    choices: QuestionChoices | None = None,
    authorization: str | None = None,
    actions: Sequence[Action] = (),
    refusals: Sequence[str] = (),
    follow_up_of: str | None = None,
    granted: GrantedAction | None = None,
) -> str:
    """The full outcome text kept in the result directory: what the owner needs, in their language."""
    parts: list[str] = []
    if explanation:
        parts.append(explanation)
    # The question or the authorization needed leads, in the owner's language, even when the
    # core's last message already contains it: the summary must carry it (R16, R17).
    if kind is OutcomeKind.QUESTION and question:
        parts.append(text("outcome.question", language, question=question))
    if kind is OutcomeKind.QUESTION and choices is not None and choices.options:
        parts.append(choices_text(choices, language))
    if kind is OutcomeKind.AUTHORIZATION and authorization:
        parts.append(text("outcome.authorization", language, needed=authorization))
    if message.strip():
        parts.append(message.strip())
    elif kind in (OutcomeKind.PARTIAL, OutcomeKind.CLOSED) and not parts[1:]:
        parts.append(text("stop.no_message", language))
    if refusals:
        parts.append("\n".join(f"- {refusal}" for refusal in refusals))
    if actions:
        lines = [text("outcome.actions_heading", language)]
        lines += [f"- {a.at.isoformat()} · {a.tool} · {a.whom}: {a.what}" for a in actions]
        parts.append("\n".join(lines))
    if follow_up_of is not None:
        parts.append(text("outcome.follows_up", language, earlier=follow_up_of))
    if granted is not None:
        parts.append(text("outcome.granted", language, action=granted.action, asked=granted.asked))
    return "\n\n".join(parts)


def choices_text(choices: QuestionChoices, language: str) -> str:
    """The options a question offers, one a line, in the owner's language, and whether an answer in the owner's
    own words is taken as well."""
    lines = [text("outcome.options_heading", language)]
    lines += [f"- {option.label}" for option in choices.options]
    if choices.free_text:
        lines.append(text("outcome.free_text", language))
    return "\n".join(lines)
