"""What the workflows signal each other: a helper's finished notice to its coordinator, and the coordinator's
token with its signals to a helper (a slot granted, a close)."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from pydantic import BaseModel, Field

from contracts.core_api import ChoiceId, QuestionChoices
from domain.ids import HelperId
from domain.outcome import OutcomeKind


class Token(BaseModel):
    """The argument of the coordinator's signals to a helper. It says nothing; its payload is encrypted, so
    only a sender with the codec keys can make one: a client without them sends a bare signal, or a plaintext
    payload the codec refuses, and the helper ignores it."""


# The question id of an authorization wait: it takes `grant` or `deny`.
AUTHORIZATION_QUESTION_ID: Final = "authorization"
# The question id of a plain-text question (one that names no choices): it takes the owner's words.
PLAIN_QUESTION_ID: Final = "question"


class Asked(BaseModel):
    """What an outcome that waits for the owner takes as an answer (R49), from the helper's finished notice: the
    question's id and choices (a plain-text question takes free text under the id `question`; an authorization
    wait takes `grant` or `deny` under the id `authorization`), the boundary item a grant adds, and what the
    follow-up is admitted with (the helper's model and boundary). Bounded: the contract's ten options of 200
    characters, a 200-character grant item and the request's own bounds on model and boundary (R36)."""

    question_id: ChoiceId
    choices: QuestionChoices | None = None
    grant: str | None = Field(default=None, description="Authorization: the item a grant adds, as the core named it.")
    model: str
    boundary: tuple[str, ...] = ()


class FinishedNotice(BaseModel):
    """Sent by a helper workflow once its outcome is final: the row passes back to the coordinator, and the
    helper no longer counts as open (R2), since the owner can read its outcome.

    `slot_held`: the helper keeps its running slot while it finds and stops a session its unanswered create may
    have made (R38); a second notice, the same but with `slot_held` False, frees the slot once it is done."""

    helper_id: HelperId
    seq: int | None = None  # None: matches any admission of the id
    kind: OutcomeKind
    generation: int
    finished_at: datetime
    slot_held: bool = False
    asked: Asked | None = None  # a question or an authorization wait: what it takes as an answer (R49)
