"""What Iva sends to start a helper (R1) and how a malformed request is refused (R5).

`HelperRequest.parse` is the one place a request is checked. It is called by the starter before
anything is sent, and again by the coordinator's update validator, so a request that reaches a
workflow by any path has passed the same checks and nothing is written for a bad one.

Two kinds of check: the field validators run whenever a request is built, including when Temporal
reads one back from a history; the admission checks (`check_against`: the limits, control characters
in text, the boundary's grammar, R5 and R41) run where a request is admitted (`parse`, the starter,
the coordinator's update validator) and not when a stored request is read back, so a history recorded
before a check was added still replays and a Goal saved before it still loads.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
)

from contracts.core_api import MODEL_MAX_CHARS
from domain.boundary import (
    BoundaryError,
    BoundaryItem,
    GrantedAction,
    control_character_problem,
    parse_boundary,
    parse_item,
)
from domain.ids import check_id
from domain.limits import (
    HELPER_BOUNDARY_ITEM_MAX_CHARS,
    HELPER_BOUNDARY_MAX_ITEMS,
    HELPER_KEEP_MS,
    HELPER_TASK_MAX_CHARS,
    LimitOverrides,
    Limits,
    WaitPolicy,
    looser_than,
)
from domain.texts import SUPPORTED_LANGUAGES


class RequestError(ValueError):
    """A request is malformed; `problems` names each wrong field and why."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def check_utf8(field: str, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{field} is not valid UTF-8 (bad character at position {error.start})") from None
    return value


# The task is prose: line breaks and tabs are kept (a carriage return too, as in CRLF text), nothing else.
TASK_ALLOWED_CONTROLS = "\n\t\r"


class HelperRequest(BaseModel):
    """One helper request: who, what, with which authority, in which language, on which model (R1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    owner: str
    helper_id: str
    task: str
    boundary: tuple[str, ...] = Field(
        default=(),
        description=(
            "The actions the owner named, each '<tool> to|with <address>[, ...]' (domain.boundary, R41); "
            "empty means find, prepare and return a draft."
        ),
    )
    language: str = "en"
    model: str
    goal_id: str | None = None
    limits: LimitOverrides | None = Field(default=None, description="Tighter limits named by the request.")
    session_limits: LimitOverrides | None = Field(
        default=None, description="The initiating session's limits; the effective limit is the minimum."
    )
    follow_up: str | None = Field(
        default=None,
        description=(
            "The helper whose question, authorization wait or partial outcome this one continues: the task is "
            "the owner's answer or instruction, and the earlier work's context is carried on."
        ),
    )
    wait: WaitPolicy | None = Field(
        default=None,
        description=(
            "When a question or authorization wait of this helper is reminded and when it expires, from its delivery "
            "(R54); none: the configured policy, or a follow-up's earlier helper's."
        ),
    )
    granted_action: GrantedAction | None = Field(
        default=None,
        description=(
            "A follow-up admitted by an owner's grant: the action granted, a boundary item performed at most once, "
            "and the one asked (R55); set by the coordinator from the answer, never by a caller's start."
        ),
    )

    @model_serializer(mode="wrap")
    def _without_unset_options(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A request without a wait or a grant reads as it did before those had fields, in a coordinator of an
        # earlier build (requests forbid fields they do not know) that has not continued as new yet during a rollout.
        data: dict[str, Any] = handler(self)
        for optional in ("wait", "granted_action"):
            if data.get(optional) is None:
                data.pop(optional, None)
        return data

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str) -> str:
        return check_id("owner", value)

    @field_validator("helper_id")
    @classmethod
    def _helper_id(cls, value: str) -> str:
        return check_id("helper id", value)

    @field_validator("goal_id")
    @classmethod
    def _goal_id(cls, value: str | None) -> str | None:
        return None if value is None else check_id("goal id", value)

    @field_validator("follow_up")
    @classmethod
    def _follow_up(cls, value: str | None) -> str | None:
        return None if value is None else check_id("follow-up helper id", value)

    @field_validator("task")
    @classmethod
    def _task(cls, value: str) -> str:
        check_utf8("task", value)
        if not value.strip():
            raise ValueError("task is empty")
        if len(value) > HELPER_TASK_MAX_CHARS:
            raise ValueError(f"task has {len(value)} characters; at most {HELPER_TASK_MAX_CHARS} are allowed")
        return value

    @field_validator("boundary")
    @classmethod
    def _boundary(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # The grammar of each item is an admission check (`check_against`, R41); these bounds are not.
        if len(value) > HELPER_BOUNDARY_MAX_ITEMS:
            raise ValueError(f"boundary names {len(value)} actions; at most {HELPER_BOUNDARY_MAX_ITEMS}")
        for item in value:
            check_utf8("boundary", item)
            if not item.strip() or len(item) > HELPER_BOUNDARY_ITEM_MAX_CHARS:
                raise ValueError(f"boundary item {item[:40]!r} must be 1-{HELPER_BOUNDARY_ITEM_MAX_CHARS} characters")
        return value

    @field_validator("language")
    @classmethod
    def _language(cls, value: str) -> str:
        if value not in SUPPORTED_LANGUAGES:
            raise ValueError(f"language {value!r} is not supported; use one of {', '.join(SUPPORTED_LANGUAGES)}")
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        check_utf8("model", value)
        if not value.strip() or len(value) > MODEL_MAX_CHARS:
            raise ValueError(f"model must be 1-{MODEL_MAX_CHARS} characters")
        return value

    @property
    def authority(self) -> tuple[BoundaryItem, ...]:
        """The parsed boundary: each irreversible tool and the addresses it may touch (R41).

        Raises `BoundaryError` for a request that was never admitted (admission refuses such a boundary)."""
        return parse_boundary(self.boundary)

    @property
    def is_goal_check(self) -> bool:
        return self.goal_id is not None

    @classmethod
    def parse(
        cls, data: dict[str, Any], defaults: Limits | None = None, keep_ms: int = HELPER_KEEP_MS
    ) -> HelperRequest:
        """Validate raw data into a request or raise `RequestError` naming every problem."""
        try:
            request = cls.model_validate(data)
        except ValidationError as error:
            raise RequestError([_describe(problem) for problem in error.errors()]) from None
        request.check_against(defaults or Limits(), keep_ms)
        return request

    def check_against(self, defaults: Limits, keep_ms: int = HELPER_KEEP_MS) -> None:
        """The admission checks; `RequestError` names every problem (R5, R41, R54).

        Text carries no control characters (the task may keep line breaks and tabs); each boundary item
        parses as a tool and the addresses it may touch (negations never do); a request may only tighten
        the limits (R1), looser values are out of range; a wait expires at the latest when its row goes
        (`keep_ms`; a reminder at or past its expiry never comes).
        """
        problems = (
            self.text_problems() + self.follow_up_problems() + self.grant_problems() + self.wait_problems(keep_ms)
        )
        if self.limits is not None:
            problems.extend(
                f"limits.{name} is above the default {getattr(defaults, name)}; a request may only tighten"
                for name in looser_than(defaults, self.limits)
            )
        if problems:
            raise RequestError(problems)

    def wait_problems(self, keep_ms: int) -> list[str]:
        problem = self.wait.beyond_keep(keep_ms) if self.wait is not None else None
        return [f"wait.expire_after_ms: {problem}"] if problem is not None else []

    def follow_up_problems(self) -> list[str]:
        """A follow-up continues an owner's own earlier helper; a Goal check starts its own work."""
        if self.follow_up is None:
            return []
        problems = []
        if self.follow_up == self.helper_id:
            problems.append(f"follow_up: helper {self.helper_id} cannot follow itself up")
        if self.goal_id is not None:
            problems.append("follow_up: a Goal check cannot be a follow-up")
        return problems

    def grant_problems(self) -> list[str]:
        """Only an answer's follow-up carries a grant, and it is one boundary item (R55)."""
        if self.granted_action is None:
            return []
        if self.follow_up is None:
            return ["granted_action: only a follow-up carries a grant"]
        try:
            parse_item(self.granted_action.action)
        except BoundaryError as error:
            return [f"granted_action.action: {error}"]
        return []

    def text_problems(self) -> list[str]:
        """Control characters in the task and model, and boundary items that do not parse (R5, R41)."""
        problems = [
            problem
            for problem in (
                control_character_problem("task", self.task, TASK_ALLOWED_CONTROLS),
                control_character_problem("model", self.model, ""),
            )
            if problem is not None
        ]
        try:
            parse_boundary(self.boundary)
        except BoundaryError as error:
            problems.append(f"boundary: {error}")
        return problems


def _describe(problem: Any) -> str:
    location = ".".join(str(part) for part in problem.get("loc", ())) or "request"
    message = str(problem.get("msg", "is invalid"))
    message = message.removeprefix("Value error, ")
    if problem.get("type") == "missing":
        return f"{location} is missing"
    if problem.get("type") == "extra_forbidden":
        return f"{location} is not a known field"
    return f"{location}: {message}"
