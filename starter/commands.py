"""Every starter command, once: its input checks and what it runs once connected, for the console script
(`starter.cli`) and the HTTP service (`starter.service`) alike, so both validate the same way, answer with the
same JSON bodies and refuse with the same codes (R42, R47).

Building a command connects to nothing: an invalid request is refused before the store or Temporal is asked
(R42). A command that reads the store runs on a `StoreReader`; one that `needs_temporal` (a write through the
coordinator, or any Goal command: Goals are Schedules) on a `HelperClient`, which also holds the Temporal client.
This module stays light to import: a read of the store must not load Temporal (R43).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Literal

from config.settings import Settings
from domain.rows import RowState
from protocol.deadlines import ReplyBy
from starter import inputs
from starter.inputs import (
    answer_request,
    answer_requests,
    check_ids,
    delivered_request,
    parse_request,
    read_request,
)

if TYPE_CHECKING:
    from domain.messages.updates import Decider

# An operation gets a StoreReader, or a HelperClient (a StoreReader with writes) if its command needs Temporal, and
# when its caller is answered: a write is answered by then, whatever happens (R48).
Operation = Callable[[Any, ReplyBy], Awaitable[Any]]


@dataclass(frozen=True)
class Command:
    """A validated command: its name, what to run, whether it needs Temporal or only the store, and whether it
    streams until stopped (a watch polls the store, so it needs an event loop even on SQLite)."""

    name: str
    run: Operation
    _: KW_ONLY
    needs_temporal: bool
    streams: bool = False


def start(fields: dict[str, Any], settings: Settings) -> Command:
    """Admit a helper (R1, R4, R5). `fields` are the request's: owner, helper_id, task, boundary, language,
    model, goal_id, limits, follow_up."""
    request = parse_request(fields, settings)
    return Command("start", lambda client, by: client.start(request, by=by), needs_temporal=True)


def list_helpers(owner: str, states: Sequence[str] | None) -> Command:
    check_ids(owner, [])
    wanted = [RowState(state) for state in states] if states else None
    return Command("list", lambda client, _: client.list_helpers(owner, wanted), needs_temporal=False)


def show(owner: str, helper_id: str) -> Command:
    check_ids(owner, [helper_id])
    return Command("show", lambda client, _: client.show(owner, helper_id), needs_temporal=False)


def close(owner: str, helper_id: str) -> Command:
    check_ids(owner, [helper_id])
    return Command("close", lambda client, by: client.close(owner, helper_id, by=by), needs_temporal=True)


def answer(
    owner: str, helper_id: str, question_id: str, option_id: str | None, text: str | None, decider: Decider
) -> Command:
    """The owner's one authoritative answer to a helper's question or authorization wait (R49); who answered and
    through what is kept in the wait's record (R56)."""
    request = answer_request(owner, helper_id, question_id, option_id, text, decider)
    return Command("answer", lambda client, by: client.answer(request, by=by), needs_temporal=True)


def answers(owner: str, body: Any, through: Literal["api", "cli"]) -> Command:
    """Several answers of the owner's in one call, each judged alone as `answer` judges it (R56)."""
    requests = answer_requests(owner, body, through)
    return Command("answers", lambda client, by: client.answer_all(owner, requests, by=by), needs_temporal=True)


def audit(owner: str, helper_id: str | None, before: str | None, limit: int) -> Command:
    return Command("audit", lambda client, _: client.audit(owner, helper_id, before, limit), needs_temporal=False)


def waits(owner: str) -> Command:
    return Command("waits", lambda client, _: client.waits(owner), needs_temporal=False)


def unreported(owner: str) -> Command:
    check_ids(owner, [])
    return Command("unreported", lambda client, _: client.unreported(owner), needs_temporal=False)


def read(owner: str, turn: str, helper_ids: list[str]) -> Command:
    request = read_request(owner, turn, helper_ids)
    return Command("read", lambda client, by: client.read(request, by=by), needs_temporal=True)


def delivered(owner: str, turn: str, answer_chars: int) -> Command:
    request = delivered_request(owner, turn, answer_chars)
    return Command("delivered", lambda client, by: client.delivered(request, by=by), needs_temporal=True)


def chat_idle(owner: str) -> Command:
    """The owner's chat turned idle: an event waiting for it is offered now (R26)."""
    return Command("idle", lambda client, by: client.chat_idle(owner, by=by), needs_temporal=True)


def usage(owner: str) -> Command:
    check_ids(owner, [])
    return Command("usage", lambda client, _: client.usage(owner), needs_temporal=False)


def watch(owner: str, helper_id: str | None) -> None:
    """A watch's checks; what it runs differs by where its lines go (a terminal, an event stream)."""
    check_ids(owner, [] if helper_id is None else [helper_id])


# --- Goals: Temporal Schedules whose checks are helpers (R30) ----------------------------------------------


def add_goal(fields: dict[str, Any], every: str) -> Command:
    """Create a Goal; `every` as the owner says it ('30m', '1h', '1d'), `fields` the rest of the Goal."""
    goal = inputs.parse_goal({**fields, "every_ms": inputs.every_ms(every)})
    return Command("goal add", lambda client, _: client.add_goal(goal), needs_temporal=True)


def list_goals(owner: str) -> Command:
    check_ids(owner, [])
    return Command("goal list", lambda client, _: client.list_goals(owner), needs_temporal=True)


def pause_goal(owner: str, goal_id: str, *, paused: bool) -> Command:
    inputs.check_goal_ids(owner, goal_id)
    name = "goal pause" if paused else "goal resume"
    return Command(name, lambda client, _: client.pause_goal(owner, goal_id, paused=paused), needs_temporal=True)


def run_goal(owner: str, goal_id: str) -> Command:
    inputs.check_goal_ids(owner, goal_id)
    return Command("goal run", lambda client, _: client.run_goal_now(owner, goal_id), needs_temporal=True)


def remove_goal(owner: str, goal_id: str) -> Command:
    inputs.check_goal_ids(owner, goal_id)
    return Command("goal remove", lambda client, _: client.remove_goal(owner, goal_id), needs_temporal=True)
