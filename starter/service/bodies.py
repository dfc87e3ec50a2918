"""The JSON bodies the service takes and gives, beyond the answers the console script prints (which are the
models of `domain.rows`, `starter.reads` and `starter.goals`): the requests, the error object and the live-lines
events. Unknown fields are refused, as unknown options are on the command line. The models of the answers and of
the events only describe them in the OpenAPI document (a typed client is generated from it); the routes write the
console script's JSON."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from contracts.core_api import MAX_CHOICE_ID_CHARS, MODEL_MAX_CHARS, QuestionChoices
from domain.ids import GOAL_ID_MAX, GOAL_ID_RULE, ID_MAX_CHARS, ID_PATTERN, ID_RULE
from domain.limits import (
    ANSWER_CHARS_MAX,
    ANSWER_TEXT_MAX_CHARS,
    ANSWERS_MAX,
    HELPER_BOUNDARY_ITEM_MAX_CHARS,
    HELPER_BOUNDARY_MAX_ITEMS,
    HELPER_TASK_MAX_CHARS,
    READ_MAX_HELPERS,
    TURN_MAX_CHARS,
    LimitOverrides,
    WaitPolicy,
)
from domain.messages.updates import DECIDER_MAX_CHARS
from domain.outcome import OutcomeKind
from domain.rows import RowState
from domain.texts import SUPPORTED_LANGUAGES

# What the document says of each field. The checks themselves are the console script's (`starter.commands`), so
# a refusal reads the same from both; these only describe them. Beyond them, a request is checked against the
# runtime's state: the core's model catalog, the boundary's grammar, the configured limits (docs/api.md).
ID_SCHEMA: dict[str, Any] = {"pattern": ID_PATTERN.pattern, "maxLength": ID_MAX_CHARS}
GOAL_ID_SCHEMA: dict[str, Any] = {"pattern": ID_PATTERN.pattern, "maxLength": GOAL_ID_MAX}
TURN_SCHEMA: dict[str, Any] = {"minLength": 1, "maxLength": TURN_MAX_CHARS, "pattern": r"\S"}
TASK_SCHEMA: dict[str, Any] = {"minLength": 1, "maxLength": HELPER_TASK_MAX_CHARS, "pattern": r"\S"}
MODEL_SCHEMA: dict[str, Any] = {"minLength": 1, "maxLength": MODEL_MAX_CHARS, "pattern": r"\S"}
LANGUAGE_SCHEMA: dict[str, Any] = {"enum": list(SUPPORTED_LANGUAGES)}
BOUNDARY_SCHEMA: dict[str, Any] = {
    "maxItems": HELPER_BOUNDARY_MAX_ITEMS,
    "items": {"type": "string", "minLength": 1, "maxLength": HELPER_BOUNDARY_ITEM_MAX_CHARS},
}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartBody(_Body):
    """`start`: the owner is the path's."""

    helper_id: str = Field(
        description=ID_RULE,
        json_schema_extra=ID_SCHEMA,
    )
    task: str = Field(description="the task text (1-20,000 characters)", json_schema_extra=TASK_SCHEMA)
    model: str = Field(
        description="the owner's selected model, a name from the core's catalog", json_schema_extra=MODEL_SCHEMA
    )
    boundary: list[str] = Field(
        default_factory=list,
        description="what the owner allowed: 'send_mail to <address>[, ...]' or 'create_event with <address>[, ...]'",
        json_schema_extra=BOUNDARY_SCHEMA,
    )
    language: str = Field(default="en", description="the owner's language", json_schema_extra=LANGUAGE_SCHEMA)
    goal_id: str | None = Field(default=None, description="the Goal this check belongs to", json_schema_extra=ID_SCHEMA)
    follow_up: str | None = Field(
        default=None,
        description="the earlier helper whose question, authorization wait or partial outcome this continues",
        json_schema_extra=ID_SCHEMA,
    )
    limits: LimitOverrides | None = Field(default=None, description="tighter limits (at most the configured ones)")
    wait: WaitPolicy | None = Field(
        default=None,
        description="when a question or authorization wait of this helper is reminded (`remind_after_ms`, at most 5) "
        "and when it expires (`expire_after_ms`, at most HELPER_KEEP_MS), each from its delivery; a follow-up "
        "without one takes its earlier helper's",
    )

    def fields(self, owner: str) -> dict[str, Any]:
        limits = self.limits.model_dump(exclude_none=True) if self.limits is not None else None
        return {**self.model_dump(exclude={"limits"}), "owner": owner, "limits": limits or None}


class ReadBody(_Body):
    """`read`: chat turn `turn` read these outcomes (before it answers)."""

    turn: str = Field(description="the chat turn's id (1-200 characters)", json_schema_extra=TURN_SCHEMA)
    helper_ids: list[str] = Field(
        description=f"the helpers whose outcomes the turn read (1-{READ_MAX_HELPERS})",
        json_schema_extra={"minItems": 1, "maxItems": READ_MAX_HELPERS, "items": {"type": "string", **ID_SCHEMA}},
    )


class DeliveredBody(_Body):
    """`delivered`: the turn answered (nonempty) and completed."""

    turn: str = Field(description="the chat turn's id (1-200 characters)", json_schema_extra=TURN_SCHEMA)
    answer_chars: int = Field(
        description=f"length of the answer the turn sent (1-{ANSWER_CHARS_MAX:,})",
        json_schema_extra={"minimum": 1, "maximum": ANSWER_CHARS_MAX},
    )


CHOICE_ID_SCHEMA: dict[str, Any] = {"minLength": 1, "maxLength": MAX_CHOICE_ID_CHARS}
DECIDER_SCHEMA: dict[str, Any] = {"minLength": 1, "maxLength": DECIDER_MAX_CHARS, "pattern": r"\S"}


class AnswerBody(_Body):
    """`answer`: the owner's answer to the helper's question or authorization wait; exactly one of `option_id` and
    `text`, except that a grant may name the action granted as `text` (the one asked or fewer of its recipients)."""

    question_id: str = Field(
        description="the question's id, as the outcome shows it ('question' for a plain-text question, "
        "'authorization' for an authorization wait)",
        json_schema_extra=CHOICE_ID_SCHEMA,
    )
    option_id: str | None = Field(
        default=None,
        description="an option the question offered; 'grant' or 'deny' for an authorization wait",
        json_schema_extra=CHOICE_ID_SCHEMA,
    )
    text: str | None = Field(
        default=None,
        description=f"an answer in the owner's words (1-{ANSWER_TEXT_MAX_CHARS:,} characters), where the question "
        "takes one; with option_id 'grant', the action granted, which may narrow the one asked, never widen it "
        "(for example 'send_mail to anna@example.com')",
        json_schema_extra={"minLength": 1, "maxLength": ANSWER_TEXT_MAX_CHARS, "pattern": r"\S"},
    )
    by: str | None = Field(
        default=None,
        description="who answered, as the caller says (for example 'owner'); kept in the wait's record",
        json_schema_extra=DECIDER_SCHEMA,
    )
    via: str | None = Field(
        default=None,
        description="through which channel (for example 'telegram'); kept in the wait's record",
        json_schema_extra=DECIDER_SCHEMA,
    )


class OneOfAnswersBody(AnswerBody):
    """One answer of `answers`: `answer`'s body, naming its helper."""

    helper_id: str = Field(description=ID_RULE, json_schema_extra=ID_SCHEMA)


class AnswersBody(_Body):
    """`answers`: several answers of the owner's, each judged alone as `answer` judges it, in this order."""

    answers: list[OneOfAnswersBody] = Field(min_length=1, max_length=ANSWERS_MAX)


class GoalBody(_Body):
    """`goal add`: the owner is the path's."""

    goal_id: str = Field(description=GOAL_ID_RULE, json_schema_extra=GOAL_ID_SCHEMA)
    every: str = Field(description="how often a check runs: 30m, 1h, 1d (1 minute to 366 days)")
    task: str = Field(description="the task each check runs (1-20,000 characters)", json_schema_extra=TASK_SCHEMA)
    model: str = Field(
        description="the owner's selected model, a name from the core's catalog", json_schema_extra=MODEL_SCHEMA
    )
    boundary: list[str] = Field(default_factory=list, json_schema_extra=BOUNDARY_SCHEMA)
    language: str = Field(default="en", json_schema_extra=LANGUAGE_SCHEMA)


def _absent_not_null(schema: dict[str, Any]) -> None:
    """An error's detail that does not apply is left out of its JSON, never null."""
    schema.pop("default", None)


class ErrorDetail(BaseModel):
    """The error object: `code` and `message` always, each detail only where it applies."""

    code: str = Field(
        description="machine-readable; the codes of each status are in its response's description (docs/api.md)"
    )
    message: str = Field(description="why, for a person; none of the caller's input is echoed whole")
    problems: list[str] | SkipJsonSchema[None] = Field(
        default=None,
        description="invalid_request (always): one line per field, path parameter or header, each naming it and "
        "the limit",
        json_schema_extra=_absent_not_null,
    )
    open_ids: list[str] | SkipJsonSchema[None] = Field(
        default=None,
        description="too_many_open and the like: the owner's open helpers, so one can be closed",
        json_schema_extra=_absent_not_null,
    )
    retry_after_s: int | SkipJsonSchema[None] = Field(
        default=None,
        description="busy (always) and unavailable (when known): ask again after this many seconds, as Retry-After",
        ge=1,
        json_schema_extra=_absent_not_null,
    )
    cause: str | SkipJsonSchema[None] = Field(
        default=None,
        description="unavailable (when known): the failure underneath in its own words (the transport's, the store "
        "driver's, Temporal's), for logs; `message` says what to do",
        json_schema_extra=_absent_not_null,
    )


class PendingDetail(BaseModel):
    code: Literal["accepted"]
    message: str
    update_id: str = Field(description="the Temporal update that carries the write")


class PendingBody(BaseModel):
    """202: Temporal accepted the write, so it is durable and will be carried out, but its answer did not come
    within HELPER_STARTER_TIMEOUT_MS. Look at the helper (show, watch), or ask again: the same request answers with
    the same helper."""

    pending: PendingDetail


class ErrorBody(BaseModel):
    """Every error, as the console script prints it (R42): the body of every status from 400 on."""

    error: ErrorDetail


class LineEvent(BaseModel):
    """`event: line`: one live line, what changed about one helper."""

    at: datetime
    owner: str
    helper_id: str
    state: RowState | None
    text: str = Field(description="what changed, as `helper-starter watch` prints it")
    choices: QuestionChoices | None = Field(
        default=None,
        description="on the line that reports a question outcome: the question's id, its options and whether a "
        "free-text answer is taken (the lines after it name the options)",
    )


class EndEvent(BaseModel):
    """`event: end`, the stream's last: why it ended. `outcome`: the one helper watched has its outcome; `removed`:
    its row is gone from the store (closed, expired or evicted); `once`: the current lines were asked for; `time`:
    HELPER_API_WATCH_MAX_MS passed (connect again); `shutdown`: the service stops (connect again)."""

    reason: Literal["outcome", "removed", "once", "time", "shutdown"]
    outcome_kind: OutcomeKind | None = None


# The live lines as a client holds them: each Server-Sent Event with its `data` parsed as JSON. A generator cannot
# type a stream, so these name the events' shapes for a client that parses them (client-typescript/).


class WatchLine(BaseModel):
    """`event: line`, with its `id:` (send it as Last-Event-ID to go on after it)."""

    event: Literal["line"]
    id: str = Field(description="where the watch is after this line: resume from it (Last-Event-ID)")
    data: LineEvent


class WatchEnd(BaseModel):
    """`event: end`, the stream's last."""

    event: Literal["end"]
    data: EndEvent


class WatchError(BaseModel):
    """`event: error`: the store stopped answering; the stream ends. Watch again later, from the last line's id."""

    event: Literal["error"]
    data: ErrorBody


WatchEvent = Annotated[WatchLine | WatchEnd | WatchError, Field(discriminator="event")]
