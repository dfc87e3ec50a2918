"""The core's HTTP session contract, as pydantic models shared by the client and the reference core.

`docs/contracts.md` describes the same contract in prose. Endpoints (all JSON):

    POST /v1/sessions                       CreateSession        -> 201/200 SessionCreated
    GET  /v1/sessions/{session_id}[?after=V&wait_ms=N]           -> 200 Snapshot | 404 Problem
    POST /v1/sessions/{session_id}/finish                        -> 202 Snapshot   (finish now, no tools)
    POST /v1/sessions/{session_id}/cancel                        -> 200 CancelAnswer
    POST /v1/sessions/{session_id}/reset                         -> 200 ResetAnswer (cleanup)
    GET  /v1/models                                              -> 200 ModelCatalog   (optional)
    GET  /v1/capabilities                                        -> 200 CoreCapabilities (optional)
    GET  /healthz                                                -> 200 {"ok": true}

Errors carry a `Problem` body naming what is wrong. A snapshot is finite: a fixed set of fields, the
per-step usage list bounded by the step ceiling, and the actions list bounded by the steps.

The runtime distrusts what the core answers (R37): the models below are what "the contract's shape"
means, so they refuse what no sane core sends (counters out of range, an identifier with control
characters or of any length) and clean what a core may send by accident (control characters and NUL in
texts, which PostgreSQL refuses). The reference core builds its answers from the same models, so it
cannot answer anything the runtime would refuse. The body size is bounded by the client
(`clients.core_client.CORE_ANSWER_MAX_BYTES`), not here.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

# Sanity bounds on the core's counters (R37). Real values sit orders of magnitude below them; beyond them
# the answer is malformed (an unsigned underflow in a core gives 2**64 - 5), and it is refused before it
# can reach a BIGINT column or the work ceiling's arithmetic.
# One model call: no context window or answer comes near a billion tokens (eve's whole input ceiling is
# four million).
MAX_STEP_TOKENS = 10**9
# A step's 1-based index; eve's step ceiling is 80, so this leaves room for any core's own numbering.
MAX_STEP_INDEX = 100_000
# Steps listed in one snapshot; a snapshot is finite (bounded by the step ceiling, 80 for eve).
MAX_SNAPSHOT_STEPS = 10_000
# Cumulative input incl. cached: a quarter of a million times eve's ceiling of 4,000,000 tokens.
MAX_INPUT_TOKENS_TOTAL = 10**12
# A snapshot's version: a counter of its changes. A session changes a few times per step; this is far beyond
# any session and within a BIGINT.
MAX_SNAPSHOT_VERSION = 2**53
# The longest wait a long-poll read may ask for. The runtime asks for HELPER_LONG_POLL_MS (20 s).
MAX_LONG_POLL_WAIT_MS = 60_000
# A session id the core makes up: the reference core's are 34 characters; the runtime stores it, puts it in
# URLs and texts, so it is short and printable.
MAX_SESSION_ID_CHARS = 200

# A structured question (R49): a short list of choices the owner picks from, each with a short label.
MAX_QUESTION_OPTIONS = 10
MAX_OPTION_LABEL_CHARS = 200
# A question's or an option's id: the owner's answer names them, so they are short and printable.
MAX_CHOICE_ID_CHARS = 64

# C0 control characters except tab, newline and carriage return; DEL; and lone UTF-16 surrogates (not
# encodable in UTF-8: a store write would fail). NUL is among them (PostgreSQL refuses it in text).
_CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
# The same for ASCII text (no surrogates there), for str.translate: much faster than re.sub on a long text.
_ASCII_CONTROL_CHARACTERS = dict.fromkeys([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])


def strip_control_characters(text: str) -> str:
    """`text` without NUL and the other control characters a text from the core must not carry (R37).

    Tab, newline and carriage return stay: they are how a message is laid out.
    """
    if _CONTROL_CHARACTERS.search(text) is None:
        return text
    if text.isascii():
        return text.translate(_ASCII_CONTROL_CHARACTERS)
    return _CONTROL_CHARACTERS.sub("", text)


def _printable_identifier(value: str) -> str:
    if not value.isprintable() or value != value.strip():
        raise ValueError("an identifier must be printable, without control characters or surrounding spaces")
    return value


# Text the core wrote (messages, questions, outcome texts, actions, refusals, errors): control characters
# are stripped when an answer is read, before anything uses or stores it.
CoreText = Annotated[str, AfterValidator(strip_control_characters)]
# An identifier the core made up: anything unprintable or overlong makes the answer malformed.
CoreIdentifier = Annotated[
    str, Field(min_length=1, max_length=MAX_SESSION_ID_CHARS), AfterValidator(_printable_identifier)
]


def _nonblank(value: str) -> str:
    if not value.strip():
        raise ValueError("a label must show something once control characters are stripped")
    return value


ChoiceId = Annotated[str, Field(min_length=1, max_length=MAX_CHOICE_ID_CHARS), AfterValidator(_printable_identifier)]


class QuestionOption(BaseModel):
    id: ChoiceId = Field(description="Names this option in the owner's answer: 1-64 printable characters.")
    label: Annotated[
        CoreText,
        Field(min_length=1, max_length=MAX_OPTION_LABEL_CHARS, description="What the owner reads: 1-200 characters."),
        AfterValidator(_nonblank),
    ]


class QuestionChoices(BaseModel):
    """What a structured question offers (R49): its id, the options the owner picks from, and whether a free-text
    answer is taken as well. A plain-text question has none. More options than the bound, an overlong or blank
    label, an overlong id or one with unprintable characters, two options with one id, or neither an option nor
    free text make the answer malformed (R37); control characters in a label are stripped, as in every core text.
    At its largest (ten options of 200 characters) it is a few kilobytes, so it passes whole."""

    question_id: ChoiceId = Field(
        description="Names the question in the owner's answer: 1-64 printable characters; another question, another id."
    )
    options: list[QuestionOption] = Field(default_factory=list, max_length=MAX_QUESTION_OPTIONS)
    free_text: bool = Field(default=False, description="The owner may answer in words instead of an option.")

    @model_validator(mode="after")
    def _answerable(self) -> QuestionChoices:
        ids = [option.id for option in self.options]
        if len(set(ids)) != len(ids):
            raise ValueError("two options of one question share an id")
        if not ids and not self.free_text:
            raise ValueError("a question with no options must take a free-text answer")
        return self


class SessionStatus(StrEnum):
    RUNNING = "running"
    QUESTION = "question"  # paused: the model asked the owner something
    AUTHORIZATION = "authorization"  # paused: an action needs authorization the boundary lacks
    COMPLETED = "completed"
    PARTIAL = "partial"  # ended at a ceiling or after finish-now, with a partial outcome
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the core restarted while the turn ran; never replayed

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        SessionStatus.COMPLETED,
        SessionStatus.PARTIAL,
        SessionStatus.FAILED,
        SessionStatus.CANCELLED,
        SessionStatus.INTERRUPTED,
    }
)


class StopReason(StrEnum):
    STEPS = "steps"  # the step ceiling (80th call is already final, without tools)
    INPUT = "input"  # the cumulative input ceiling (4,000,000, including cached input)
    FINISH_NOW = "finish_now"  # the helper asked for a final answer without tools


class SessionLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_steps: int = Field(gt=0)
    max_input_tokens: int = Field(gt=0)


# An owner's or a helper's id, as a session names them: the runtime's id format is `domain.ids`, built on this.
ID_MAX_CHARS = 64
# A model's name as a catalog lists it and a session selects it; an owner's request is held to the same bound.
MODEL_MAX_CHARS = 100
MODELS_MAX = 1_000


class ModelCatalog(BaseModel):
    """`GET /v1/models` (optional for a core): the model names a CreateSession may select. A core without it
    answers 404 and the starter leaves the check to create."""

    models: list[Annotated[str, Field(min_length=1, max_length=MODEL_MAX_CHARS)]] = Field(max_length=MODELS_MAX)


# A grant's id and digest: the runtime's are SHA-256 hex digests.
GRANT_ID_MAX_CHARS = 64
MAX_GRANTS = 1


class Grant(BaseModel):
    """An action the owner granted a follow-up, to be performed at most once (R55). `digest` is SHA-256 of the
    action's tool and sorted targets (`domain.boundary.action_digest`); the core performs one call whose tool and set
    of targets have that digest, once per `id`, across every session, retry and restart, and refuses any later one
    (`grant_used`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=GRANT_ID_MAX_CHARS, pattern=r"^[0-9a-f]+$")
    action: str = Field(min_length=1, max_length=200, description="The action granted, a boundary item.")
    digest: str = Field(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$")


class CreateSession(BaseModel):
    """Start one background turn. The same `idempotency_key` always names the same session (R9)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    idempotency_key: str = Field(min_length=1, max_length=200)
    owner: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    helper_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    task: str = Field(min_length=1)
    boundary: list[str] = Field(default_factory=list)
    language: str = Field(min_length=2, max_length=8)
    model: str = Field(min_length=1, max_length=MODEL_MAX_CHARS)
    limits: SessionLimits
    continue_from: CoreIdentifier | None = Field(
        default=None,
        description=(
            "A follow-up (optional, asked only of a core whose GET /v1/capabilities says `continue_from: true`): "
            "the session this one continues. The new session's conversation is that session's plus `task`."
        ),
    )

    grants: list[Grant] = Field(
        default_factory=list,
        max_length=MAX_GRANTS,
        description=(
            "A follow-up's grant (optional, sent only to a core whose GET /v1/capabilities says `grants: true`): "
            "the action the owner granted, performed at most once."
        ),
    )

    @model_serializer(mode="wrap")
    def _without_unset_options(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        # A create that continues nothing and carries no grant goes on the wire exactly as before those fields
        # existed: a core without them refuses unknown fields (extra="forbid" here too), and it is never sent one.
        data: dict[str, object] = handler(self)
        if data.get("continue_from") is None:
            data.pop("continue_from", None)
        if not data.get("grants"):
            data.pop("grants", None)
        return data


class CoreCapabilities(BaseModel):
    """`GET /v1/capabilities` (optional for a core): what it offers beyond the base contract.

    A core without the endpoint (404) offers none of them. Unknown names are ignored, so a core may
    advertise capabilities a runtime does not know yet."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    continue_from: bool = Field(
        default=False, description="A create may name `continue_from`: a follow-up of a finished session."
    )
    long_poll: bool = Field(
        default=False, description="Snapshots carry `version` and reads take `after`/`wait_ms` (R44)."
    )
    grants: bool = Field(
        default=False,
        description="A create may carry `grants`: actions the owner granted, each performed at most once (R55).",
    )


class SessionCreated(BaseModel):
    session_id: CoreIdentifier
    created: bool = Field(description="False when the idempotency key named an existing session.")


class StepUsage(BaseModel):
    """Usage of one model call. `input_tokens` is the whole prompt, cached part included."""

    index: int = Field(ge=1, le=MAX_STEP_INDEX)
    input_tokens: int = Field(ge=0, le=MAX_STEP_TOKENS)
    cached_input_tokens: int = Field(default=0, ge=0, le=MAX_STEP_TOKENS)
    output_tokens: int = Field(ge=0, le=MAX_STEP_TOKENS)
    compacted: bool = Field(default=False, description="The context was compacted before this call.")


class Action(BaseModel):
    """An action performed on the owner's behalf: whom it affected, what happened, when (R18)."""

    tool: CoreText
    whom: CoreText
    what: CoreText
    at: datetime


class Authorization(BaseModel):
    action: CoreText = Field(description="The action that needs authorization, as the model named it.")
    reason: CoreText = ""


class SessionOutcome(BaseModel):
    kind: SessionStatus
    text: CoreText
    stop_reason: StopReason | None = None


class Snapshot(BaseModel):
    """The finite durable state of one session, as the helper folds it (R11)."""

    session_id: CoreIdentifier
    status: SessionStatus
    steps: list[StepUsage] = Field(default_factory=list, max_length=MAX_SNAPSHOT_STEPS)
    input_tokens_total: int = Field(
        ge=0, le=MAX_INPUT_TOKENS_TOTAL, description="Cumulative input incl. cached (the core's ceiling)."
    )
    last_message: CoreText = Field(default="", description="The last completed assistant message.")
    question: CoreText | None = None
    choices: QuestionChoices | None = Field(
        default=None,
        description=(
            "A structured question (optional, R49): what the owner may pick from. It comes with the `question` "
            "text (choices without one make the snapshot malformed) and means something only while the status "
            "is `question`; with any other status it is not read (a pause cancelled keeps what was asked). "
            "Without it a question is plain text."
        ),
    )
    authorization: Authorization | None = None
    actions: list[Action] = Field(default_factory=list)
    refusals: list[CoreText] = Field(
        default_factory=list,
        description="Actions refused: outside the boundary, or a grant's action once it was performed (`grant_used`).",
    )
    outcome: SessionOutcome | None = None
    error: CoreText | None = None
    finish_requested: bool = False
    cancel_requested: bool = False
    version: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SNAPSHOT_VERSION,
        description=(
            "Changes with every change of the snapshot (R44). A core that sets it answers long-poll reads: "
            "`GET /v1/sessions/{id}?after=<version>&wait_ms=<ms>` returns at once when the version differs from "
            "`after`, else when the snapshot changes or `wait_ms` has passed. A core without it is polled."
        ),
    )

    @model_validator(mode="after")
    def _choices_belong_to_a_question(self) -> Snapshot:
        if self.choices is not None and not self.question:
            raise ValueError("choices come with the question they offer answers to")
        return self


class CancelAnswer(BaseModel):
    stopped: bool = Field(description="True only once the turn has actually stopped.")
    status: SessionStatus


class ResetAnswer(BaseModel):
    reset: bool


class Problem(BaseModel):
    """An error body: a stable code and a message naming what is wrong."""

    code: str
    message: str
