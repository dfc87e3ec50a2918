"""A Goal: a standing owner goal whose checks run as helpers on a Temporal Schedule (R30).

A Goal is the request a check repeats (task, boundary, language, model, limits) plus how often. Each
check is an ordinary helper request carrying the Goal id, so it passes the same admission: it must leave
one open place and one row place for the owner's own helpers (R2, R3).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from domain.ids import check_goal_id
from domain.limits import LimitOverrides
from domain.requests import HelperRequest, RequestError

MIN_EVERY = timedelta(minutes=1)
_DURATION = re.compile(r"^(\d+)\s*(s|m|h|d)$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


class Goal(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    owner: str
    goal_id: str
    task: str
    boundary: tuple[str, ...] = ()
    language: str = "en"
    model: str
    every_ms: int = Field(ge=int(MIN_EVERY.total_seconds() * 1000))
    limits: LimitOverrides | None = None

    @field_validator("goal_id")
    @classmethod
    def _goal_id(cls, value: str) -> str:
        return check_goal_id(value)

    def check_request(self, helper_id: str) -> HelperRequest:
        """The helper request of one check."""
        return HelperRequest(
            owner=self.owner,
            helper_id=helper_id,
            task=self.task,
            boundary=self.boundary,
            language=self.language,
            model=self.model,
            goal_id=self.goal_id,
            limits=self.limits,
        )

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Goal:
        """Validate a Goal, including the request its checks will make; RequestError names what is wrong."""
        try:
            goal = cls.model_validate(data)
        except ValidationError as error:
            raise RequestError([_describe(problem) for problem in error.errors()]) from None
        HelperRequest.parse(goal.check_request(check_helper_id(goal.goal_id, datetime(2000, 1, 1))).model_dump())
        return goal


def check_helper_id(goal_id: str, at: datetime) -> str:
    """The helper id of the check scheduled at `at`: stable, so a retried start admits it once (R5)."""
    return f"{goal_id}.{at:%Y%m%d%H%M%S}"


def parse_every(text: str) -> timedelta:
    """'90s', '15m', '1h', '1d' -> a duration of at least a minute."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise RequestError([f"every: {text!r} is not a duration like 30m, 1h or 1d"])
    every = timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    if every < MIN_EVERY:
        raise RequestError([f"every: {text!r} is shorter than one minute"])
    return every


def _describe(problem: Any) -> str:
    location = ".".join(str(part) for part in problem.get("loc", ())) or "goal"
    return f"{location}: {str(problem.get('msg', 'is invalid')).removeprefix('Value error, ')}"
