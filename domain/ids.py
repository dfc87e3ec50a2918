"""Owner, helper and Goal ids: validated wherever they enter (R40).

An id names a coordinator workflow, a row's key and a result directory, so every model that carries one into
a path, a store key or a workflow id checks it, not only the starter's request: a Temporal client without
the starter (or a crafted continue-as-new input) must not reach outside its room.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Final

from pydantic import AfterValidator

from contracts.core_api import ID_MAX_CHARS as ID_MAX_CHARS

# Ids end up in workflow ids, directory names and URLs: a safe alphabet, and short. The length is held by the core's
# session contract, the lowest layer that needs it; the format is spelled here and only here.
ID_PATTERN: Final = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{ID_MAX_CHARS - 1}}}$")
# A Goal's id is shorter, so that `<goal id>.<timestamp>` stays a valid helper id.
GOAL_ID_MAX: Final = 40


def id_rule(max_chars: int = ID_MAX_CHARS) -> str:
    return f"1-{max_chars} letters, digits, '.', '_' or '-', starting with a letter or digit"


ID_RULE: Final = id_rule()
GOAL_ID_RULE: Final = id_rule(GOAL_ID_MAX)
# How much of a bad input an error message repeats: enough to recognise it, never a 10,000-character echo.
ECHO_MAX_CHARS: Final = 40


def clip(value: str, limit: int = ECHO_MAX_CHARS) -> str:
    """A short prefix of an input for a message: at most `limit` characters in all."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def echo(value: object) -> str:
    """A short, printable prefix of a value for an error message."""
    return clip(repr(value))


def check_id(kind: str, value: str) -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise ValueError(f"{kind} {echo(value)} is not valid: use {ID_RULE}")
    return value


def check_goal_id(value: str) -> str:
    """A Goal's id: an id short enough that its checks' helper ids, `<goal id>.<timestamp>`, are ids too."""
    check_id("goal id", value)
    if len(value) > GOAL_ID_MAX:
        raise ValueError(f"goal id is {len(value)} characters; at most {GOAL_ID_MAX}")
    return value


def directory_name(value: str) -> str:
    """The directory an id's results live under. Ids differ in case (`ANNA`, `anna`) but a case-insensitive
    volume (Azure Files, macOS) would give both one directory: an id with capitals gets a suffix from its
    exact spelling; '~' is not allowed in ids, so no other id can name the same directory."""
    check_id("id", value)
    if value == value.lower():
        return value
    return f"{value.lower()}~{hashlib.sha256(value.encode()).hexdigest()[:10]}"


def _owner(value: str) -> str:
    return check_id("owner", value)


def _helper(value: str) -> str:
    return check_id("helper id", value)


def _goal(value: str) -> str:
    return check_id("goal id", value)


OwnerId = Annotated[str, AfterValidator(_owner)]
HelperId = Annotated[str, AfterValidator(_helper)]
GoalId = Annotated[str, AfterValidator(_goal)]
