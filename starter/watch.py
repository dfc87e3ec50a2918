"""Live lines for an owner's helpers, read from the store only: `helper-starter watch` and the demo's watcher.

`LiveLines` remembers what it last showed of each helper and turns each new set of views into the lines
that say what changed, in a sensible order: a helper is "admitted" before it is "running", a step count
is shown only while it changes, the outcome's headline is shown once (a later state change gets a short
line of its own) with a question's options under it, a row gone from the store is said to be removed, and every
line fits a terminal row, cut at a word with "…".

A line is one statement about one row, made when a poll finds the row changed from what the lines said of it; a
question's headline, its options and its actions share one change of its row. A line's time is when that happened, as
the row records it (admitted, got its slot, finished, delivered), so lines printed later, as `watch --once` prints
them, keep their times; what the row does not date (a step count, a place in the queue, a removal) is dated when the
poll saw it. `watch` prints each poll's lines in the order of their times across helpers (`in_time_order`); the
event stream keeps its ids' order, helper by helper, each line with its time.
Each line's id (`Mark`) says where the watch is after it: its place in the watch's order, and what the lines have
said of each row. The store's moments cannot say that: the lines depend on what the watcher saw (a row changed
twice between polls gets one line), a waiting helper's place changes with other rows' writes, not its own, and
rows written by workers on different clocks commit out of their `updated_at` order.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import signal
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from contracts.core_api import QuestionChoices
from domain.ids import ID_PATTERN
from domain.outcome import OutcomeKind
from domain.rows import HelperView, RowState
from protocol.errors import unknown_helper
from starter.reads import StoreReader

POLL_INTERVAL_S = 0.5
TEXT_MAX_CHARS = 160  # of one line's message, so a line stays readable in a terminal
WHO_WIDTH = 24
ELLIPSIS = "…"
REMOVED = "removed · its row is gone from the store (closed, expired or evicted)"


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


# A helper whose outcome was already shown changes state only by being delivered, closed, or by its wait expiring.
_LATER_STATE = {
    RowState.DELIVERED: "delivered · a chat turn read the outcome and answered the owner",
    RowState.CLOSED: "closed by the owner · the outcome is kept for reading",
    RowState.EXPIRED: "expired · its question or authorization was not answered in time; nothing was done",
    RowState.UNREPORTED: "unreported · the outcome waits for the next chat turn",
}


@dataclass(frozen=True)
class LiveLine:
    who: str  # owner/helper_id
    text: str
    helper_id: str
    state: RowState | None  # the helper's state when the line was made; none once its row is removed
    at: datetime  # when it happened (see the module)
    # A question outcome's choices, on the first line that reports the outcome: what a page needs to offer them.
    choices: QuestionChoices | None
    # Where the watch is after this line (`Mark.id`): a watch started from it sends the lines after this one.
    id: str


@dataclass(frozen=True)
class Shown:
    """What the lines have said so far about one row: everything a later line's text depends on."""

    row: str  # which admission under the helper id: `row_tag`
    state: RowState
    steps: int = 0
    ahead: int | None = None
    outcome_kind: OutcomeKind | None = None
    details: int = 0  # of the lines under the outcome's headline (options, actions), how many were said


def row_tag(view: HelperView) -> str:
    """Which admission a view is of: a helper id taken again after its row expired is another row."""
    return hashlib.sha256(f"{view.helper_id}@{view.admitted_at.isoformat()}".encode()).hexdigest()[:TAG_CHARS]


# --- where a watch is: a line's id -----------------------------------------------------------------------

MARK_FORMAT = "1"  # the first field of every id; another format is refused, not misread
TAG_CHARS = 8
SCOPE_CHARS = 8
MARK_MAX_CHARS = 16_384  # far above an owner's rows (HELPER_MAX_ROWS, 64-character ids); a longer one is refused
_STATES = {state.value[0]: state for state in RowState}
_KINDS = {kind.value: kind for kind in OutcomeKind}


def scope_of(owner: str, helper_id: str | None) -> str:
    """Which watch an id belongs to: the owner's, or one helper's."""
    return hashlib.sha256(f"{owner}/{helper_id or ''}".encode()).hexdigest()[:SCOPE_CHARS]


@dataclass(frozen=True)
class Mark:
    """Where a watch is, carried whole in each line's id, so any instance of the service, restarted or not, goes on
    from it with nothing kept per client: how many lines the watch sent (the ids' order), which watch it is, and
    what its lines said of each row it reported.

    The id: `1~<count>~<scope>` then, per row, `~<helper id>:<row tag>:<state letter>:<steps>:<ahead>:<outcome
    kind>:<details>` (helper ids hold none of `~` and `:`), safe in a header and a query string as it is."""

    count: int
    scope: str
    shown: dict[str, Shown] = field(default_factory=dict)

    @property
    def id(self) -> str:
        rows = [
            f"{helper_id}:{said.row}:{said.state.value[0]}:{said.steps}:{'' if said.ahead is None else said.ahead}:"
            f"{'' if said.outcome_kind is None else said.outcome_kind.value}:{said.details}"
            for helper_id, said in sorted(self.shown.items())
        ]
        return "~".join([MARK_FORMAT, str(self.count), self.scope, *rows])

    @classmethod
    def parse(cls, text: str, scope: str) -> Mark:
        """The mark an id names, for the watch of `scope`; ValueError saying why it names none."""
        if len(text) > MARK_MAX_CHARS:
            raise ValueError(f"it is longer than {MARK_MAX_CHARS:,} characters")
        fields = text.split("~")
        # A line's id counts the lines up to it, so the first is 1.
        if len(fields) < 3 or fields[0] != MARK_FORMAT or not _count(fields[1]) or int(fields[1]) < 1:
            raise ValueError("it is not a line id this service gave")
        if fields[2] != scope:
            raise ValueError("it is a line id of another watch (another owner, or another helper)")
        shown: dict[str, Shown] = {}
        for row in fields[3:]:
            parts = row.split(":")
            if len(parts) != 7:
                raise ValueError("it is not a line id this service gave")
            helper_id, tag, state, steps, ahead, kind, details = parts
            if (
                not ID_PATTERN.fullmatch(helper_id)
                or helper_id in shown
                or len(tag) != TAG_CHARS
                or any(c not in "0123456789abcdef" for c in tag)
                or state not in _STATES
                or not _count(steps)
                or not (ahead == "" or _count(ahead))
                or not (kind == "" or kind in _KINDS)
                or not _count(details)
                or (kind == "" and details != "0")  # the lines under an outcome come only with it
            ):
                raise ValueError("it is not a line id this service gave")
            shown[helper_id] = Shown(
                tag, _STATES[state], int(steps), int(ahead) if ahead else None, _KINDS.get(kind), int(details)
            )
        return cls(int(fields[1]), scope, shown)


def contradiction(mark: Mark, views: Iterable[HelperView]) -> str | None:
    """Why `mark` cannot be a line id this service gave, given the rows as they are now, or None. A row's steps only
    grow, its outcome never changes once written, and the lines under it are as many as it has: a mark that says
    more of a row (the same admission) than the row holds was never given."""
    for view in views:
        said = mark.shown.get(view.helper_id)
        if said is None or said.row != row_tag(view):
            continue
        if (
            said.steps > view.steps
            or (said.outcome_kind is not None and said.outcome_kind is not view.outcome_kind)
            or said.details > (len(_details(view)) if view.outcome_kind is not None else 0)
        ):
            return f"it says more of {view.helper_id} than its row holds, so this service did not give it"
    return None


def _count(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 18


def render(who: str, text: str, at: datetime | None = None) -> str:
    """One printed line: the local time, who, what."""
    return f"{(at or datetime.now()).astimezone():%H:%M:%S}  {who:<{WHO_WIDTH}} {text}"


class LiveLines:
    """Change detection over successive views of helpers: each update returns only what is new.

    Each line carries its `id`, the `Mark` after it: the lines a `LiveLines` started from that mark returns for the
    same views are exactly the lines this one would return next. With `mark`, it starts there (for one owner)."""

    def __init__(self, mark: Mark | None = None) -> None:
        self.views: dict[tuple[str, str], HelperView] = {}
        self._shown: dict[tuple[str, str], Shown] = {}
        self.scope = "" if mark is None else mark.scope
        self.count = 0 if mark is None else mark.count
        self._resumed = {} if mark is None else dict(mark.shown)  # taken as the first owner's, at its first update

    def update(self, owner: str, views: Iterable[HelperView]) -> list[LiveLine]:
        """The lines of what changed since the last update: `views` are all of the owner's helpers that are
        watched (a helper missing from them is reported removed)."""
        self._shown.update({(owner, helper_id): shown for helper_id, shown in self._resumed.items()})
        self._resumed = {}
        lines: list[LiveLine] = []
        present: set[str] = set()
        for view in views:
            key = (owner, view.helper_id)
            present.add(view.helper_id)
            self.views[key] = view
            before = self._shown.get(key)
            tag = row_tag(view)
            if before is not None and before.row != tag:
                before = None  # the helper id names a new admission: it is reported from its start
            said = _said(view, tag)
            if before == said:
                continue
            who = f"{owner}/{view.helper_id}"
            for text, shown, choices, at in _changes(before, view, said):
                self._shown[key] = shown
                lines.append(self._line(owner, who, text, view.helper_id, view.state, choices, at))
            self._shown[key] = said
        for owner_of, helper_id in [key for key in self._shown if key[0] == owner and key[1] not in present]:
            del self._shown[(owner_of, helper_id)]
            self.views.pop((owner_of, helper_id), None)
            lines.append(self._line(owner, f"{owner}/{helper_id}", REMOVED, helper_id, None, None, _now()))
        return lines

    def _line(
        self,
        owner: str,
        who: str,
        text: str,
        helper_id: str,
        state: RowState | None,
        choices: QuestionChoices | None,
        at: datetime,
    ) -> LiveLine:
        self.count += 1
        shown = {helper_id: seen for (owner_of, helper_id), seen in self._shown.items() if owner_of == owner}
        return LiveLine(who, text, helper_id, state, at, choices, Mark(self.count, self.scope, shown).id)


def _said(view: HelperView, tag: str) -> Shown:
    """What the lines say of `view` once all its changes are told."""
    details = len(_details(view)) if view.outcome_kind is not None else 0
    return Shown(tag, view.state, view.steps, view.ahead, view.outcome_kind, details)


# A line's text, what is said once it is, the choices it carries, when it happened.
Change = tuple[str, Shown, QuestionChoices | None, datetime]


def _now() -> datetime:
    return datetime.now(UTC)


def _changes(before: Shown | None, view: HelperView, said: Shown) -> list[Change]:
    """What to say about `view` given what was said before (None: nothing yet), each line with what is said once
    it is: the last line says all of `said`, an earlier one only its part, so a watch resumed after it goes on
    with the lines after it."""
    tag = said.row
    now = _now()
    if view.outcome_kind is not None:
        details = _details(view)
        finished = view.finished_at or now
        if before is not None and before.outcome_kind is not None:
            part = before.state
            changes: list[Change] = [
                (text, replace(said, state=part, details=number), None, finished)
                for number, text in enumerate(details[before.details :], start=before.details + 1)
            ]
            if before.state is not view.state and view.state in _LATER_STATE:
                if view.state is RowState.DELIVERED and view.followed_up_by is not None:
                    later = f"delivered · the owner answered it: {view.followed_up_by} follows it up"
                else:
                    later = _LATER_STATE[view.state]
                at = {RowState.DELIVERED: view.delivered_at, RowState.UNREPORTED: view.finished_at}.get(view.state)
                changes.append((later, said, None, at or now))
            return _ending(changes, said)
        opening: list[Change] = [(_headline(view), replace(said, details=0), view.choices, finished)]
        return _ending(
            opening
            + [(text, replace(said, details=number), None, finished) for number, text in enumerate(details, start=1)],
            said,
        )
    if view.state is RowState.CLOSED:
        return [("closed while running · its slot is held until the core confirms the stop", said, None, now)]
    admitted = "admitted" if view.follow_up_of is None else f"admitted · follows up {view.follow_up_of}"
    if view.state is RowState.WAITING:
        if before is None:
            return [(f"{admitted} · waiting for a slot · {ahead_text(view.ahead)}", said, None, view.admitted_at)]
        return [(f"waiting for a slot · {ahead_text(view.ahead)}", said, None, now)]
    steps_before = 0 if before is None else before.steps
    changes = []
    running = Shown(tag, view.state, steps_before, view.ahead)
    if before is None:
        changes.append((f"{admitted} · running now", running, None, view.admitted_at))
    elif before.state is RowState.WAITING:
        changes.append(("got a slot · running now", running, None, view.started_at or now))
    if view.steps > 0 and steps_before != view.steps:
        changes.append((progress_text(view), said, None, now))
    return _ending(changes, said)


def _ending(changes: list[Change], said: Shown) -> list[Change]:
    """`changes` with its last line saying all of `said`."""
    if changes:
        text, _, choices, at = changes[-1]
        changes[-1] = (text, said, choices, at)
    return changes


def _headline(view: HelperView) -> str:
    assert view.outcome_kind is not None
    if view.outcome_kind is OutcomeKind.CLOSED:
        opening = f"stopped · the core confirmed, the slot is free · outcome {view.outcome_kind.value}"
    else:
        opening = f"{view.state.value} · outcome {view.outcome_kind.value}"
    return cut(f"{opening}: {headline(view.summary)}")


def _details(view: HelperView) -> list[str]:
    """The lines under an outcome's headline: a question's options, then the actions taken. They never change once
    the outcome is written, so a watch resumed among them goes on from the next."""
    lines = []
    if view.choices is not None and view.choices.options:
        lines += ["  " + cut(f"option {option.id} · {option.label}") for option in view.choices.options]
        if view.choices.free_text:
            lines.append("  or an answer in the owner's own words")
    return lines + ["  " + cut(f"action · {a.tool} · {a.whom}: {a.what}") for a in view.actions]


def has_outcome(views: Iterable[HelperView]) -> bool:
    """Whether the helper has its outcome: a one-helper watch ends with it, as `gh run watch` ends with the run."""
    return any(view.outcome_kind is not None for view in views)


def watch_over(views: list[HelperView]) -> bool:
    """Whether a one-helper watch is over, given the helper's views: it has its outcome, or its row is gone."""
    return not views or has_outcome(views)


def in_time_order(lines: Iterable[LiveLine]) -> list[LiveLine]:
    """One poll's lines in the order they happened across helpers. Each helper's own lines keep their order: a line
    dated when the poll saw it must not pass its row's dated ones, whatever the workers' clocks say."""
    by_helper: dict[str, list[LiveLine]] = {}
    for line in lines:
        by_helper.setdefault(line.who, []).append(line)
    return list(heapq.merge(*by_helper.values(), key=lambda line: line.at))


async def live_lines(
    client: StoreReader,
    owner: str,
    helper_id: str | None,
    *,
    once: bool = False,
    stop: asyncio.Event | None = None,
    interval_s: float = POLL_INTERVAL_S,
    mark: Mark | None = None,
) -> AsyncIterator[LiveLine]:
    """The live lines of the owner's helpers (or one), polled from the store, until `stop` is set; with `once`,
    the current ones. A watch of one helper ends by itself once the helper has its outcome or its row is gone
    (after its `removed` line, at the first poll that finds it gone); one that never had a line of the helper and
    finds no row raises unknown_helper. From `mark`, the lines after the one whose id it is, in the ids' order."""
    async for lines in polled_lines(client, owner, helper_id, once=once, stop=stop, interval_s=interval_s, mark=mark):
        for line in lines:
            yield line


async def polled_lines(
    client: StoreReader,
    owner: str,
    helper_id: str | None,
    *,
    once: bool = False,
    stop: asyncio.Event | None = None,
    interval_s: float = POLL_INTERVAL_S,
    mark: Mark | None = None,
) -> AsyncIterator[list[LiveLine]]:
    """`live_lines`, each poll's lines together."""
    live = LiveLines(mark)
    while True:
        views = await client.list_helpers(owner)
        if helper_id is not None:
            views = [view for view in views if view.helper_id == helper_id]
            if not views and live.count == 0:
                raise unknown_helper(helper_id)
        lines = live.update(owner, views)
        if lines:
            yield lines
        if once or (helper_id is not None and watch_over(views)) or (stop is not None and stop.is_set()):
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
    """Print the live lines of `live_lines`, each with the local time it happened, each poll's in time order."""
    async for lines in polled_lines(client, owner, helper_id, once=once, stop=stop, interval_s=interval_s):
        for line in in_time_order(lines):
            write(render(line.who, line.text, line.at))


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
