"""The starter's input checks: pure, and light to import, so every command validates its input before it
connects to anything (R42) and a read command never loads the Temporal client (R43)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import ValidationError

from config.settings import Settings
from config.store_address import StoreAddress
from domain.ids import check_goal_id, check_id, clip
from domain.limits import READ_MAX_HELPERS, TURN_MAX_CHARS, delivered_problem
from domain.requests import HelperRequest, RequestError
from protocol.errors import InvalidRequest

if TYPE_CHECKING:  # the Goal checks load domain.goals when a Goal command runs: a read never needs it (R43)
    from domain.goals import Goal
    from domain.messages.updates import AnswerRequest, Decider, DeliveredRequest, ReadRequest

# A Schedule's interval must stay far from what Temporal (and timedelta) can hold: at most a year and a day.
MAX_EVERY = timedelta(days=366)


def parse_request(request: HelperRequest | dict[str, Any], settings: Settings) -> HelperRequest:
    """A validated request, checked against the configured limits; InvalidRequest names every problem (R5)."""
    try:
        if isinstance(request, HelperRequest):
            request.check_against(settings.policy.limits, settings.policy.keep_ms)
            return request
        return HelperRequest.parse(request, settings.policy.limits, settings.policy.keep_ms)
    except RequestError as error:
        raise InvalidRequest(str(error), {"problems": error.problems}) from None


_check_owner = partial(check_id, "owner")
_check_helper_id = partial(check_id, "helper id")


def check_ids(owner: str, helper_ids: Iterable[str], field: str = "helper_id") -> None:
    """The owner's id and helper ids (`field` names where they came from); InvalidRequest names each bad one."""
    problems = _id_problems("owner", owner, _check_owner)
    for helper_id in helper_ids:
        problems += _id_problems(field, helper_id, _check_helper_id)
    if problems:
        raise InvalidRequest("; ".join(problems), {"problems": problems})


def _id_problems(field: str, value: str, check: Callable[[str], str]) -> list[str]:
    """Why `value` is not a valid id by `check` (`domain.ids`), as a problem line naming its field (the API's name: a
    path parameter, a body's field), or none."""
    try:
        check(value)
    except ValueError as error:
        return [f"{field}: {error}"]
    return []


def _invalid(problem: str) -> InvalidRequest:
    return InvalidRequest(problem, {"problems": [problem]})


def check_turn(turn: str) -> None:
    """A chat turn's id: 1-TURN_MAX_CHARS characters, not only spaces, valid UTF-8, no control characters."""
    if not turn.strip() or len(turn) > TURN_MAX_CHARS:
        raise _invalid(f"turn must be 1-{TURN_MAX_CHARS} characters, not only spaces (it has {len(turn)})")
    try:
        turn.encode("utf-8")
    except UnicodeEncodeError as error:
        raise _invalid(f"turn is not valid UTF-8 (bad character at position {error.start})") from None
    if any(unicodedata.category(character) == "Cc" for character in turn):
        raise _invalid("turn must not contain control characters")


def check_read(owner: str, turn: str, helper_ids: list[str]) -> None:
    """`read`'s input, checked as `domain.messages.updates.ReadRequest` is and more: so the message always builds."""
    if not helper_ids:
        raise _invalid("helper_ids: name at least one helper id to read")
    if len(helper_ids) > READ_MAX_HELPERS:
        raise _invalid(f"helper_ids: {len(helper_ids)} helper ids; one read names at most {READ_MAX_HELPERS}")
    check_ids(owner, helper_ids, "helper_ids")
    check_turn(turn)


def check_delivered(owner: str, turn: str, answer_chars: int) -> None:
    """`delivered`'s input, checked as `domain.messages.updates.DeliveredRequest` is and more."""
    check_ids(owner, [])
    check_turn(turn)
    problem = delivered_problem(answer_chars)
    if problem is not None:
        raise _invalid(problem)


def answer_request(
    owner: str,
    helper_id: str,
    question_id: str,
    option_id: str | None = None,
    text: str | None = None,
    decider: Decider | None = None,
) -> AnswerRequest:
    """`answer`'s message, checked as the coordinator's validator checks it (domain.book.answer_problems)."""
    from domain.book import answering
    from domain.messages.updates import AnswerRequest, OwnerAnswer

    check_ids(owner, [helper_id])
    answer = _built(lambda: OwnerAnswer(question_id=question_id, option_id=option_id, text=text))
    problems = answering.answer_problems(answer, decider)
    if problems:
        raise InvalidRequest("; ".join(problems), {"problems": problems})
    return AnswerRequest(owner=owner, helper_id=helper_id, answer=answer, decider=decider)


# The fields of one answer of `answers` (R56): `answer`'s, with the helper each names.
ANSWER_FIELDS = frozenset({"helper_id", "question_id", "option_id", "text", "by", "via"})


def answer_requests(owner: str, body: Any, through: Literal["api", "cli"]) -> list[AnswerRequest]:
    """`answers`' messages, each checked as `answer` checks it, all before any is sent: one that breaks a limit makes
    the whole call an invalid request naming it (`answers[2].text: …`), and nothing is written."""
    from domain.limits import ANSWERS_MAX
    from domain.messages.updates import Decider

    items = body.get("answers") if isinstance(body, dict) else None
    if not isinstance(items, list) or not 1 <= len(items) <= ANSWERS_MAX:
        raise InvalidRequest(f"answers: give a list of 1-{ANSWERS_MAX} answers, each naming its helper_id")
    unknown = set(body) - {"answers"}
    problems = [f"{field}: not a field of answers" for field in sorted(unknown)]
    requests = []
    for index, item in enumerate(items):
        where = f"answers[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("helper_id"), str):
            problems.append(f"{where}: an object naming its helper_id")
            continue
        strings = {name: value for name, value in item.items() if name != "helper_id"}
        problems += [f"{where}.{name}: not a field of an answer" for name in sorted(set(item) - ANSWER_FIELDS)]
        problems += [
            f"{where}.{name}: a string" for name, value in strings.items() if not isinstance(value, str | None)
        ]
        if problems:
            continue
        try:
            decider = Decider(by=item.get("by"), via=item.get("via"), through=through)
            requests.append(
                answer_request(
                    owner,
                    item["helper_id"],
                    item.get("question_id", ""),
                    item.get("option_id"),
                    item.get("text"),
                    decider,
                )
            )
        except InvalidRequest as error:
            problems += [f"{where}: {problem}" for problem in error.details["problems"]]
    if problems:
        raise InvalidRequest("; ".join(problems), {"problems": problems})
    return requests


def read_request(owner: str, turn: str, helper_ids: list[str]) -> ReadRequest:
    """`read`'s message, built within its checks: whatever the message refuses is an invalid request (R48)."""
    from domain.messages.updates import ReadRequest

    check_read(owner, turn, helper_ids)
    return _built(lambda: ReadRequest(owner=owner, turn=turn, helper_ids=helper_ids))


def delivered_request(owner: str, turn: str, answer_chars: int) -> DeliveredRequest:
    """`delivered`'s message, built within its checks: whatever the message refuses is an invalid request (R48)."""
    from domain.messages.updates import DeliveredRequest

    check_delivered(owner, turn, answer_chars)
    return _built(lambda: DeliveredRequest(owner=owner, turn=turn, answer_chars=answer_chars))


Message = TypeVar("Message")


def _built(build: Callable[[], Message]) -> Message:
    try:
        return build()
    except ValidationError as error:
        problems = [_problem(problem) for problem in error.errors()]
        raise InvalidRequest("; ".join(problems), {"problems": problems}) from None


def _problem(problem: Any) -> str:
    where = ".".join(str(part) for part in problem.get("loc", ())) or "request"
    return f"{where}: {str(problem.get('msg', 'is not valid')).removeprefix('Value error, ')}"


def every_ms(text: str) -> int:
    """`--every` ('30m', '1h', '1d') in milliseconds, from one minute to MAX_EVERY; InvalidRequest otherwise (R42)."""
    from domain.goals import parse_every

    shown = clip(text)
    try:
        every = parse_every(text)
    except RequestError as error:
        problems = [problem.replace(repr(text), repr(shown)) for problem in error.problems]
        raise InvalidRequest("; ".join(problems), {"problems": problems}) from None
    except (ValueError, OverflowError):  # a number too long for int() or too large for a timedelta
        every = MAX_EVERY + timedelta(days=1)
    if every > MAX_EVERY:
        problem = f"every: {shown!r} is longer than {MAX_EVERY.days} days"
        raise InvalidRequest(problem, {"problems": [problem]})
    return int(every.total_seconds() * 1000)


def parse_goal(data: dict[str, Any]) -> Goal:
    """A validated Goal, with the request its checks will make; InvalidRequest names every problem (R5, R42)."""
    from domain.goals import Goal, check_helper_id

    try:
        try:
            goal = Goal.parse(data)
        except ValidationError:
            # Goal.parse builds its check's request directly, which raises pydantic's error: parse that
            # request again for a RequestError naming the problems (the same checks as an admission).
            goal_id = str(data.get("goal_id", ""))
            fields = ("owner", "task", "boundary", "language", "model", "limits")
            check = {name: data[name] for name in fields if name in data}
            helper_id = check_helper_id(goal_id, datetime(2000, 1, 1))
            HelperRequest.parse({**check, "goal_id": goal_id, "helper_id": helper_id})
            raise RequestError(["goal: is not valid"]) from None
    except RequestError as error:
        raise InvalidRequest(str(error), {"problems": error.problems}) from None
    if goal.every_ms > MAX_EVERY.total_seconds() * 1000:
        problem = f"every_ms: {goal.every_ms} is longer than {MAX_EVERY.days} days"
        raise InvalidRequest(problem, {"problems": [problem]})
    return goal


def check_goal_ids(owner: str, goal_id: str) -> None:
    """The owner's id and a Goal's; InvalidRequest names each bad one."""
    problems = _id_problems("owner", owner, _check_owner) + _id_problems("goal_id", goal_id, check_goal_id)
    if problems:
        raise InvalidRequest("; ".join(problems), {"problems": problems})


_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s'\"]*@")

_SECRET_PARAMETER = re.compile(r"(?i)\b(?P<name>password|passwd|pwd|secret|token|api_?key)=[^&\s'\"]*")


def redact(text: str) -> str:
    """Never print a password: any URL's user information and any `password=`-like parameter are hidden."""
    return _SECRET_PARAMETER.sub(r"\g<name>=***", _USERINFO.sub(r"\g<scheme>***@", text))


def scrub(text: str, store: StoreAddress | None = None) -> str:
    """`text` with the store's URL (if given) in its printable form, and every secret redacted."""
    return redact(text if store is None else store.scrubbed(text))
