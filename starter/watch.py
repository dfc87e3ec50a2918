"""Live lines for an owner's helpers, read from the store only: `helper-starter watch` and the demo's watcher.

`LiveLines` remembers what it last showed of each helper and turns each new set of views into the lines
that say what changed, in a sensible order: a helper is "admitted" before it is "running", a step count
is shown only while it changes, the outcome's headline is shown once (a later state change gets a short
line of its own) with a question's options under it, and every line fits a terminal row, cut at a word with "…".
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from contracts.core_api import QuestionChoices
from domain.outcome import OutcomeKind
from domain.rows import HelperView, RowState
from protocol.errors import UNKNOWN_HELPER, HelperRefused
from starter.reads import StoreReader

POLL_INTERVAL_S = 0.5
TEXT_MAX_CHARS = 160  # of one line's message, so a line stays readable in a terminal
WHO_WIDTH = 24
ELLIPSIS = "…"


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """`1 step`, `2 steps`, `1,200 work tokens`."""
    word = noun if count == 1 else (plural_noun or noun + "s")
    return f"{count:,} {word}"


def cut(text: str, limit: int = TEXT_MAX_CHARS) -> str:
    """`text` on one line, at most `limit` characters; a longer one is cut at a word and ends with "…"."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    room = flat[: limit - len(ELLIPSIS)]
    boundary = room.rfind(" ")
    if boundary > len(room) // 2:  # a word boundary that keeps most of the room; else cut inside the word
        room = room[:boundary]
    return room.rstrip(" ,;:·-") + ELLIPSIS


def headline(summary: str | None) -> str:
    """The summary's first paragraph: the outcome's gist (the question, the stop's reason, what was done).

    Later paragraphs repeat it in the core's own words (a question appears twice) or list details.
    """
    for paragraph in (summary or "").split("\n\n"):
        if paragraph.strip():
            return cut(paragraph)
    return ""


def ahead_text(ahead: int | None) -> str:
    return "nobody ahead" if not ahead else f"{plural(ahead, 'helper')} ahead"


def progress_text(view: HelperView) -> str:
    return f"running · {plural(view.steps, 'step')} · {plural(view.work_tokens, 'work token')}"


# A helper whose outcome was already shown changes state only by being delivered or closed.
_LATER_STATE = {
    RowState.DELIVERED: "delivered · a chat turn read the outcome and answered the owner",
    RowState.CLOSED: "closed by the owner · the outcome is kept for reading",
    RowState.UNREPORTED: "unreported · the outcome waits for the next chat turn",
}


@dataclass(frozen=True)
class LiveLine:
    who: str  # owner/helper_id
    text: str
    helper_id: str = ""
    state: RowState | None = None  # the helper's state when the line was made
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    # A question outcome's choices, on the first line that reports the outcome: what a page needs to offer them.
    choices: QuestionChoices | None = None


@dataclass(frozen=True)
class _Shown:
    """What the lines have said so far about one helper."""

    state: RowState
    steps: int
    ahead: int | None
    outcome_kind: OutcomeKind | None


def render(who: str, text: str, at: datetime | None = None) -> str:
    """One printed line: the time, who, what."""
    return f"{(at or datetime.now()):%H:%M:%S}  {who:<{WHO_WIDTH}} {text}"


class LiveLines:
    """Change detection over successive views of helpers: each update returns only what is new."""

    def __init__(self) -> None:
        self.views: dict[tuple[str, str], HelperView] = {}
        self._shown: dict[tuple[str, str], _Shown] = {}

    def update(self, owner: str, views: Iterable[HelperView]) -> list[LiveLine]:
        lines: list[LiveLine] = []
        for view in views:
            key = (owner, view.helper_id)
            self.views[key] = view
            before = self._shown.get(key)
            now = _Shown(view.state, view.steps, view.ahead, view.outcome_kind)
            if before == now:
                continue
            self._shown[key] = now
            who = f"{owner}/{view.helper_id}"
            reports_outcome = view.outcome_kind is not None and (before is None or before.outcome_kind is None)
            for number, text in enumerate(_changes(before, view)):
                choices = view.choices if reports_outcome and number == 0 else None
                lines.append(LiveLine(who, text, view.helper_id, view.state, choices=choices))
        return lines


def _changes(before: _Shown | None, view: HelperView) -> list[str]:
    """What to say about `view` given what was said before (None: nothing yet)."""
    if view.outcome_kind is not None:
        if before is not None and before.outcome_kind is not None:
            if before.state is view.state or view.state not in _LATER_STATE:
                return []
            if view.state is RowState.DELIVERED and view.followed_up_by is not None:
                return [f"delivered · the owner answered it: {view.followed_up_by} follows it up"]
            return [_LATER_STATE[view.state]]
        return _outcome(view)
    if view.state is RowState.CLOSED:
        return ["closed while running · its slot is held until the core confirms the stop"]
    admitted = "admitted" if view.follow_up_of is None else f"admitted · follows up {view.follow_up_of}"
    if view.state is RowState.WAITING:
        if before is None:
            return [f"{admitted} · waiting for a slot · {ahead_text(view.ahead)}"]
        return [f"waiting for a slot · {ahead_text(view.ahead)}"]
    lines: list[str] = []
    if before is None:
        lines.append(f"{admitted} · running now")
    elif before.state is RowState.WAITING:
        lines.append("got a slot · running now")
    if view.steps > 0 and (before is None or before.steps != view.steps):
        lines.append(progress_text(view))
    return lines


def _outcome(view: HelperView) -> list[str]:
    assert view.outcome_kind is not None
    if view.outcome_kind is OutcomeKind.CLOSED:
        opening = f"stopped · the core confirmed, the slot is free · outcome {view.outcome_kind.value}"
    else:
        opening = f"{view.state.value} · outcome {view.outcome_kind.value}"
    lines = [cut(f"{opening}: {headline(view.summary)}")]
    if view.choices is not None and view.choices.options:
        lines += ["  " + cut(f"option {option.id} · {option.label}") for option in view.choices.options]
        if view.choices.free_text:
            lines.append("  or an answer in the owner's own words")
    lines += ["  " + cut(f"action · {a.tool} · {a.whom}: {a.what}") for a in view.actions]
    return lines


def has_outcome(views: Iterable[HelperView]) -> bool:
    """Whether a one-helper watch is over: the helper has its outcome, as `gh run watch` ends with the run."""
    return any(view.outcome_kind is not None for view in views)


async def live_lines(
    client: StoreReader,
    owner: str,
    helper_id: str | None,
    *,
    once: bool = False,
    stop: asyncio.Event | None = None,
    interval_s: float = POLL_INTERVAL_S,
) -> AsyncIterator[LiveLine]:
    """The live lines of the owner's helpers (or one), polled from the store, until `stop` is set; with `once`,
    the current ones. A watch of one helper ends by itself once the helper has its outcome."""
    live = LiveLines()
    while True:
        views = await client.list_helpers(owner)
        if helper_id is not None:
            views = [view for view in views if view.helper_id == helper_id]
            if once and not views:
                raise HelperRefused(UNKNOWN_HELPER, f"There is no helper {helper_id}.")
        for line in live.update(owner, views):
            yield line
        if once or (helper_id is not None and has_outcome(views)) or (stop is not None and stop.is_set()):
            return
        if stop is None:
            await asyncio.sleep(interval_s)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
            if stop.is_set():
                return


async def follow(
    client: StoreReader,
    owner: str,
    helper_id: str | None,
    write: Callable[[str], None],
    *,
    once: bool = False,
    stop: asyncio.Event | None = None,
    interval_s: float = POLL_INTERVAL_S,
) -> None:
    """Print the live lines of `live_lines`, each with the local time it was seen."""
    async for line in live_lines(client, owner, helper_id, once=once, stop=stop, interval_s=interval_s):
        write(render(line.who, line.text))


async def follow_until_interrupted(
    client: StoreReader, owner: str, helper_id: str | None, write: Callable[[str], None], *, once: bool
) -> None:
    """`follow`, ending quietly on Ctrl-C (SIGINT) or SIGTERM: stopping is how a watch ends, not an error."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await follow(client, owner, helper_id, write, once=once, stop=stop)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
