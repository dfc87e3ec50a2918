"""The conversation a follow-up session carries over from the session it continues (`continue_from`).

A session that stops where it can be continued (a question, an authorization wait, a partial outcome)
stores its conversation without the instructions: the task and the items. A follow-up session starts
from it with its own instructions (its own boundary), the answers to tool calls the pause left open, and
the owner's follow-up as a new item.

What is stored is bounded like the other texts the reference core keeps: each text at most
`CARRIED_TEXT_MAX_CHARS` (what the runtime keeps of a message in a row) and the whole at most
`CARRIED_MAX_CHARS`. Over that, the oldest exchanges go first (the first task always stays) and a core
notice tells the model how many items were left out, so a chain of follow-ups stays bounded too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from contracts.core_api import SessionStatus, Snapshot
from reference.core.model import (
    AssistantTurn,
    Conversation,
    ConversationItem,
    CoreNotice,
    FollowUp,
    ToolCall,
    ToolResult,
)
from reference.core.tools import ASK_OWNER, REQUEST_AUTHORIZATION

# The runtime keeps 64,000 characters of a message in a row (domain.bounds.ROW_MESSAGE_MAX); one carried text
# keeps as much.
CARRIED_TEXT_MAX_CHARS = 64_000
# About 100,000 tokens of earlier conversation: far below a model's window and the input ceiling, and a
# bounded row however long a chain of follow-ups grows.
CARRIED_MAX_CHARS = 400_000

# The statuses a session can be continued from; a cancelled one only when it was cancelled while paused
# (the runtime's cleanup cancel of an authorization wait), which leaves its question or authorization.
PAUSED_OR_PARTIAL = frozenset({SessionStatus.QUESTION, SessionStatus.AUTHORIZATION, SessionStatus.PARTIAL})

ANSWER_FOLLOWS = {
    ASK_OWNER: "Paused for the owner. The owner's answer is the next message.",
    REQUEST_AUTHORIZATION: (
        "Paused for authorization. The owner's answer is the next message; the authority in the instructions "
        "is the one that holds now."
    ),
}
NOT_RUN = "Not run: the session paused before this call. Call it again if it is still needed."


def continuable(snapshot: Snapshot) -> bool:
    """Whether a session in this state may be continued by a follow-up session."""
    if snapshot.status in PAUSED_OR_PARTIAL:
        return True
    paused_when_cancelled = snapshot.question is not None or snapshot.authorization is not None
    return snapshot.status is SessionStatus.CANCELLED and paused_when_cancelled


def _cut(text: str, limit: int = CARRIED_TEXT_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call_to_json(call: ToolCall) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "arguments_error": call.arguments_error,
    }


def _item_to_json(item: ConversationItem) -> dict[str, Any]:
    match item:
        case AssistantTurn(text=text, tool_calls=calls):
            return {"kind": "assistant", "text": _cut(text), "tool_calls": [_call_to_json(call) for call in calls]}
        case ToolResult(call_id=call_id, name=name, content=content):
            return {"kind": "tool_result", "call_id": call_id, "name": name, "content": _cut(content)}
        case CoreNotice(text=text):
            return {"kind": "notice", "text": _cut(text)}
        case FollowUp(text=text):
            return {"kind": "follow_up", "text": _cut(text)}
    raise TypeError(f"not a conversation item: {item!r}")


def _item_from_json(data: dict[str, Any]) -> ConversationItem:
    match data["kind"]:
        case "assistant":
            calls = tuple(
                ToolCall(call["call_id"], call["name"], dict(call["arguments"]), call.get("arguments_error"))
                for call in data["tool_calls"]
            )
            return AssistantTurn(data["text"], calls)
        case "tool_result":
            return ToolResult(data["call_id"], data["name"], data["content"])
        case "notice":
            return CoreNotice(data["text"])
        case "follow_up":
            return FollowUp(data["text"])
    raise ValueError(f"unknown conversation item kind {data['kind']!r}")


def _size(item: dict[str, Any]) -> int:
    return len(json.dumps(item, ensure_ascii=False))


def dump_conversation(conversation: Conversation) -> str:
    """The conversation to store, without its instructions (a follow-up has its own), bounded."""
    task = _cut(conversation.task)
    items = [_item_to_json(item) for item in conversation.items]
    total = len(task) + sum(_size(item) for item in items)
    dropped = 0
    # Oldest first, and never leave a tool result without the assistant turn that called it.
    while items and (total > CARRIED_MAX_CHARS or (items[0]["kind"] == "tool_result" and dropped)):
        total -= _size(items.pop(0))
        dropped += 1
    if dropped:
        notice = f"{dropped} earlier items of this conversation were left out to keep it within bounds."
        items.insert(0, _item_to_json(CoreNotice(notice)))
    return json.dumps({"task": task, "items": items}, ensure_ascii=False)


def earlier_task(stored: str) -> str:
    """The first task of a stored conversation."""
    return str(json.loads(stored)["task"])


def load_conversation(stored: str, instructions: str) -> Conversation:
    data = json.loads(stored)
    items = tuple(_item_from_json(item) for item in data["items"])
    return Conversation(instructions=instructions, task=data["task"], items=items)


def _answer_open_calls(items: Sequence[ConversationItem]) -> tuple[ConversationItem, ...]:
    """The items with a result after every tool call the pause left without one: a chat API refuses an
    assistant's tool call that has no answer."""
    answered = {item.call_id for item in items if isinstance(item, ToolResult)}
    result: list[ConversationItem] = []
    open_calls: list[ToolCall] = []
    for item in items:
        if not isinstance(item, ToolResult) and open_calls:
            result.extend(_answer(call) for call in open_calls)
            open_calls = []
        result.append(item)
        if isinstance(item, AssistantTurn):
            open_calls = [call for call in item.tool_calls if call.call_id not in answered]
    result.extend(_answer(call) for call in open_calls)
    return tuple(result)


def _answer(call: ToolCall) -> ToolResult:
    return ToolResult(call.call_id, call.name, ANSWER_FOLLOWS.get(call.name, NOT_RUN))


def follow_up_conversation(earlier: Conversation, follow_up: str) -> Conversation:
    """The conversation a follow-up session starts with: the earlier one, its open calls answered, then the
    owner's follow-up. `earlier` carries the follow-up session's own instructions."""
    items = (*_answer_open_calls(earlier.items), FollowUp(follow_up))
    return Conversation(earlier.instructions, earlier.task, items)
