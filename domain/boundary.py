"""The authority boundary's grammar: each item names an irreversible tool and what it may touch (R41, R33).

A boundary item is one line of the form

    send_mail to <address>[, <address>...]       mail only to these recipients
    create_event with <address>[, <address>...]  events whose attendees are all among these

The tool name is read case-insensitively and may be spelled with spaces or hyphens (`Send mail`,
`send-mail`); addresses are compared case-insensitively. Nothing else parses: a bare tool name (it
would authorize everyone), another tool, a condition or a negation (`send_mail: NO, never`, `never send
mail`, `send mail only after I confirm`, `don't send mail`) is refused with a message that gives the
accepted forms. A closed grammar is what makes "negations never authorize" hold: there is no place in
an item where a negation could be written and still parse. Control characters and line breaks are
refused, so an item can never smuggle a line into the model's instructions.

The wire form stays a list of strings (`HelperRequest.boundary`, the core's `CreateSession.boundary`);
the parsed form is derived here, by the starter and the coordinator (`parse_boundary`, refusing) and by
the reference core (`readable_items`, where an item that does not parse authorizes nothing).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from domain.limits import HELPER_BOUNDARY_ITEM_MAX_CHARS, HELPER_BOUNDARY_MAX_ITEMS

# The irreversible tools a boundary can authorize, each with the word that introduces its targets.
TOOL_KEYWORDS: dict[str, str] = {"send_mail": "to", "create_event": "with"}
TARGET_NOUNS: dict[str, str] = {"send_mail": "recipients", "create_event": "attendees"}

ACCEPTED_FORMS = " or ".join(f"'{tool} {word} <address>[, <address>...]'" for tool, word in TOOL_KEYWORDS.items())

# A plain address, compared in lower case: common local-part characters (no quoting, no "*" that would
# read as a wildcard) and a dotted domain.
_ADDRESS = re.compile(
    r"[a-z0-9_%+-]+(?:\.[a-z0-9_%+-]+)*"
    r"@[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+"
)
# Each tool's name as an item may spell it ("send_mail", "send mail", "Send-Mail"), then the rest.
_ITEMS = {tool: re.compile(r"[ _-]+".join(tool.split("_")) + r"(?: (?P<rest>.*))?") for tool in TOOL_KEYWORDS}
# Words that mark a negation or a condition; used only to explain why an item did not parse.
_NEGATION = re.compile(
    r"\b(no|not|never|don'?t|do not|doesn'?t|nobody|none|without|unless|except|until|only after|only if|"
    r"before|after|if)\b|n't\b"
)
# Characters that break a line for a reader or a model, beyond the control characters.
_LINE_BREAKS = frozenset("\u2028\u2029\x85")

QUOTE_CHARS = 40


class BoundaryError(ValueError):
    """A boundary item that does not parse; the message says why and gives the accepted forms."""


class BoundaryItem(BaseModel):
    """One parsed item: an irreversible tool and the addresses it may touch (R41)."""

    model_config = ConfigDict(frozen=True)

    tool: str
    targets: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.tool} {TOOL_KEYWORDS[self.tool]} {', '.join(self.targets)}"


class GrantedAction(BaseModel):
    """An owner's grant to a follow-up (R55): the action granted, performed at most once, and the action the wait
    asked for, which it narrows or is."""

    model_config = ConfigDict(frozen=True)

    action: str
    asked: str


def quoted(text: str) -> str:
    """A short, escaped quote of what was given (never the whole of a long input)."""
    cut = text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "…"
    return repr(cut)


def first_control_character(text: str, allowed: str = "") -> int | None:
    """The position of the first control character in `text` not in `allowed` (NUL, C0, DEL, C1), or None."""
    for position, char in enumerate(text):
        if char in allowed:
            continue
        if unicodedata.category(char) == "Cc":
            return position
    return None


def control_character_problem(field: str, text: str, allowed: str = "") -> str | None:
    """A sentence naming `field` and the first control character in it, or None when there is none."""
    position = first_control_character(text, allowed)
    if position is None:
        return None
    return f"{field} contains the control character U+{ord(text[position]):04X} at position {position}"


def parse_item(text: str) -> BoundaryItem:
    """One boundary item as a `BoundaryItem`; raises `BoundaryError` saying why and what parses (R41)."""
    if not text.strip():
        raise BoundaryError(f"a boundary item is empty; use {ACCEPTED_FORMS}")
    if len(text) > HELPER_BOUNDARY_ITEM_MAX_CHARS:
        raise BoundaryError(
            f"boundary item {quoted(text)} has {len(text)} characters; at most {HELPER_BOUNDARY_ITEM_MAX_CHARS}"
        )
    problem = control_character_problem(f"boundary item {quoted(text)}", text)
    if problem is not None or any(char in _LINE_BREAKS for char in text):
        raise BoundaryError((problem or f"boundary item {quoted(text)} contains a line break") + "; use one line")
    normalized = " ".join(text.lower().split())
    matched = _tool_of(normalized)
    if matched is None:
        raise _unparsed(text, normalized)
    tool, match = matched
    keyword = TOOL_KEYWORDS[tool]
    rest = match["rest"] or ""
    if not rest:
        raise BoundaryError(
            f"boundary item {quoted(text)} names {tool} but not whom it may touch; use {ACCEPTED_FORMS}"
        )
    if not rest.startswith(f"{keyword} "):
        raise _unparsed(text, normalized, f"{tool} takes '{keyword} <address>[, <address>...]'")
    targets: list[str] = []
    for piece in rest.removeprefix(f"{keyword} ").split(","):
        target = piece.strip()
        if not _ADDRESS.fullmatch(target):
            raise _unparsed(
                text, normalized, f"{quoted(target)} is not an e-mail address; list addresses separated by commas"
            )
        if target not in targets:
            targets.append(target)
    return BoundaryItem(tool=tool, targets=tuple(targets))


def _tool_of(normalized: str) -> tuple[str, re.Match[str]] | None:
    """The tool an item names at its start, with the match (whose `rest` follows the name), or None."""
    for tool, pattern in _ITEMS.items():
        match = pattern.fullmatch(normalized)
        if match is not None:
            return tool, match
    return None


def _unparsed(text: str, normalized: str, detail: str | None = None) -> BoundaryError:
    reason = detail or f"it is not of an accepted form (a boundary names only {' and '.join(TOOL_KEYWORDS)})"
    if _NEGATION.search(normalized):
        reason = "a negation or condition never authorizes anything (leave the action out instead)"
    return BoundaryError(f"boundary item {quoted(text)} does not parse: {reason}; use {ACCEPTED_FORMS}")


def parse_boundary(items: Sequence[str]) -> tuple[BoundaryItem, ...]:
    """Every item parsed, or `BoundaryError` for the first that does not parse or for too many (R41)."""
    if len(items) > HELPER_BOUNDARY_MAX_ITEMS:
        raise BoundaryError(f"boundary names {len(items)} actions; at most {HELPER_BOUNDARY_MAX_ITEMS}")
    return tuple(parse_item(item) for item in items)


def readable_items(items: Iterable[str]) -> tuple[tuple[BoundaryItem, ...], int]:
    """For a core: the items that parse, and how many did not (those authorize nothing, R41)."""
    parsed: list[BoundaryItem] = []
    unreadable = 0
    for item in items:
        try:
            parsed.append(parse_item(item))
        except BoundaryError:
            unreadable += 1
    return tuple(parsed), unreadable


def address_list(text: str) -> tuple[str, ...] | None:
    """The addresses a tool argument names (comma- or semicolon-separated), or None if any is not one."""
    addresses = tuple(piece.strip().lower() for piece in re.split(r"[,;]", text))
    if not addresses or not all(_ADDRESS.fullmatch(address) for address in addresses):
        return None
    return addresses


def allowed_targets(boundary: Iterable[BoundaryItem], tool: str) -> frozenset[str] | None:
    """The addresses the boundary lets `tool` touch, or None when no item names the tool."""
    named = [item for item in boundary if item.tool == tool]
    if not named:
        return None
    return frozenset(target for item in named for target in item.targets)


def outside(boundary: Iterable[BoundaryItem], tool: str, targets: Sequence[str]) -> tuple[str, ...] | None:
    """The targets the boundary does not let `tool` touch; None when it does not authorize `tool` at all.

    A call is allowed exactly when this is `()`: the tool is named and every target is listed (R41).
    """
    allowed = allowed_targets(boundary, tool)
    if allowed is None:
        return None
    return tuple(target for target in targets if target.lower() not in allowed)


def beyond(asked: BoundaryItem, granted: BoundaryItem) -> BoundaryItem | None:
    """The part of a granted action that the action asked for does not cover: another tool (all of it) or the
    targets it adds; None when the grant is the action asked or narrows it to some of its targets (R55). A parsed
    item names at least one target, so a narrowing never grants nothing."""
    if granted.tool != asked.tool:
        return granted
    added = tuple(target for target in granted.targets if target not in asked.targets)
    return BoundaryItem(tool=granted.tool, targets=added) if added else None


def action_digest(item: BoundaryItem) -> str:
    """SHA-256 of one action: its tool and its sorted targets, so every spelling of the action has the one digest a
    grant is bound to and a core honours once (R55)."""
    return hashlib.sha256("\n".join((item.tool, *sorted(item.targets))).encode()).hexdigest()
