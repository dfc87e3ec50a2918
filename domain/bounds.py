"""Caps on everything the runtime hands Temporal (R36): payloads stay far below the server's limits.

Temporal warns at 256 KB per payload and fails at 2 MB; a follow result that carried a core's 3 MB
snapshot was refused and retried until the hard ceiling. So a result carries at most these many
actions, refusals and characters, with the totals, and the whole lists and texts go to the result
directory (`session.json`), where the finalizer reads them.
"""

from __future__ import annotations

from typing import Final, TypeVar

# Every payload the runtime produces stays under this (checked by tests on the worst cases).
PAYLOAD_MAX_BYTES: Final = 256 * 1024
# In a payload: the first actions and refusals, the rest counted; each of their texts cut to
# PAYLOAD_ITEM_TEXT_MAX characters (an action is then 2 KB at most, 4 bytes a character at worst).
PAYLOAD_ACTIONS_MAX: Final = 50
PAYLOAD_REFUSALS_MAX: Final = 20
PAYLOAD_ITEM_TEXT_MAX: Final = 300
# In a payload: question, authorization and error texts cut to this many characters.
PAYLOAD_TEXT_MAX: Final = 4_000
# A question's choices pass whole: the contract bounds them (contracts.core_api: ten options of 200 characters,
# ids of 64), about 11 KB at worst.
# The row keeps this much of the last completed message; the whole message is in the result directory.
ROW_MESSAGE_MAX: Final = 64_000
# Rows show this many actions; the outcome text and outcome.json in the result directory list them all.
ROW_ACTIONS_MAX: Final = 100
# What a reminder or an expiry notice says the wait asked (the question's options, the action to authorize).
NOTICE_ABOUT_MAX: Final = 300

Item = TypeVar("Item")


def first(items: list[Item], limit: int) -> list[Item]:
    return items if len(items) <= limit else items[:limit]


def cut(value: str | None, limit: int) -> str | None:
    """At most `limit` characters, marked with an ellipsis when cut."""
    if value is None or len(value) <= limit:
        return value
    return value[: limit - 1] + "…"
