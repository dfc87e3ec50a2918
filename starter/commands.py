"""Every starter command, once: its input checks and what it runs once connected, for the console script
(`starter.cli`) and the HTTP service (`starter.service`) alike, so both validate the same way, answer with the
same JSON bodies and refuse with the same codes (R42, R47).

Building a command connects to nothing: an invalid request is refused before the store or Temporal is asked
(R42). A read command runs on a `StoreReader`; a write command (`writes`) on a `HelperClient`, which also holds
the Temporal client. This module stays light to import: a read command must not load Temporal (R43).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from config.settings import Settings
from domain.rows import RowState
from protocol.deadlines import ReplyBy
from starter import inputs
from starter.inputs import answer_request, check_ids, delivered_request, parse_request, read_request

# A read command's operation gets a StoreReader, a write command's a HelperClient (a StoreReader with writes), and
# when its caller is answered: a write is answered by then, whatever happens (R48).
Operation = Callable[[Any, ReplyBy], Awaitable[Any]]


@dataclass(frozen=True)
class Command:
    """A validated command: its name, whether it writes (and so needs Temporal), what to run, and whether it
    streams until stopped (a watch polls the store, so it needs an event loop even on SQLite)."""

    name: str
    writes: bool
    run: Operation
    streams: bool = False


def start(fields: dict[str, Any], settings: Settings) -> Command:
    """Admit a helper (R1, R4, R5). `fields` are the request's: owner, helper_id, task, boundary, language,
    model, goal_id, limits, follow_up."""
    request = parse_request(fields, settings)
    return Command("start", True, lambda client, by: client.start(request, by=by))


def list_helpers(owner: str, states: Sequence[str] | None) -> Command:
    check_ids(owner, [])
    wanted = [RowState(state) for state in states] if states else None
    return Command("list", False, lambda client, _: client.list_helpers(owner, wanted))


def show(owner: str, helper_id: str) -> Command:
    check_ids(owner, [helper_id])
    return Command("show", False, lambda client, _: client.show(owner, helper_id))


def close(owner: str, helper_id: str) -> Command:
    check_ids(owner, [helper_id])
    return Command("close", True, lambda client, by: client.close(owner, helper_id, by=by))


def answer(owner: str, helper_id: str, question_id: str, option_id: str | None, text: str | None) -> Command:
    """The owner's one authoritative answer to a helper's question or authorization wait (R49)."""
    request = answer_request(owner, helper_id, question_id, option_id, text)
    return Command("answer", True, lambda client, by: client.answer(request, by=by))


def unreported(owner: str) -> Command:
    check_ids(owner, [])
    return Command("unreported", False, lambda client, _: client.unreported(owner))


def read(owner: str, turn: str, helper_ids: list[str]) -> Command:
    request = read_request(owner, turn, helper_ids)
    return Command("read", True, lambda client, by: client.read(request, by=by))


def delivered(owner: str, turn: str, answer_chars: int) -> Command:
    request = delivered_request(owner, turn, answer_chars)
    return Command("delivered", True, lambda client, by: client.delivered(request, by=by))


def usage(owner: str) -> Command:
    check_ids(owner, [])
    return Command("usage", False, lambda client, _: client.usage(owner))


def watch(owner: str, helper_id: str | None) -> None:
    """A watch's checks; what it runs differs by where its lines go (a terminal, an event stream)."""
    check_ids(owner, [] if helper_id is None else [helper_id])


# --- Goals: Temporal Schedules whose checks are helpers (R30) ----------------------------------------------


def add_goal(fields: dict[str, Any], every: str) -> Command:
    """Create a Goal; `every` as the owner says it ('30m', '1h', '1d'), `fields` the rest of the Goal."""
    goal = inputs.parse_goal({**fields, "every_ms": inputs.every_ms(every)})
    return Command("goal add", True, lambda client, _: client.add_goal(goal))


def list_goals(owner: str) -> Command:
    check_ids(owner, [])
    return Command("goal list", True, lambda client, _: client.list_goals(owner))


def pause_goal(owner: str, goal_id: str, *, paused: bool) -> Command:
    inputs.check_goal_ids(owner, goal_id)
    name = "goal pause" if paused else "goal resume"
    return Command(name, True, lambda client, _: client.pause_goal(owner, goal_id, paused=paused))


def run_goal(owner: str, goal_id: str) -> Command:
    inputs.check_goal_ids(owner, goal_id)
    return Command("goal run", True, lambda client, _: client.run_goal_now(owner, goal_id))


def remove_goal(owner: str, goal_id: str) -> Command:
    inputs.check_goal_ids(owner, goal_id)
    return Command("goal remove", True, lambda client, _: client.remove_goal(owner, goal_id))
