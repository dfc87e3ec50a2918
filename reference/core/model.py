"""The small interface between the turn engine and a model adapter.

The engine owns the loop, the ceilings, the tools and their authority; a model only answers one
call at a time. Each call gets the whole conversation (instructions with the helper block, the task,
prior assistant turns, tool results, core notices and, in a follow-up session, the owner's follow-ups)
and the tools it may call; an empty tool list
means this call is the final one and must answer with text. The adapter also owns the selected
model's compaction threshold, so it reports whether it compacted the context before the call.

The scripted model (`reference.core.scripted_model`) implements this, and so does the
OpenAI-compatible adapter (`reference.core.openai_model`), which maps `Conversation` to chat
messages and `ToolSpec` to function tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model, with a JSON-schema `parameters` object."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    # Set by an adapter when the model's arguments could not be read (e.g. not a JSON object); the
    # call then gets an error result naming this, so the model can try again.
    arguments_error: str | None = None


@dataclass(frozen=True)
class AssistantTurn:
    """What the model answered in one call."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ToolResult:
    """The result of one tool call; content from mail, notes or pages is wrapped as untrusted data."""

    call_id: str
    name: str
    content: str


@dataclass(frozen=True)
class CoreNotice:
    """A message from the core itself, e.g. that tools were removed and the next answer is final."""

    text: str


@dataclass(frozen=True)
class FollowUp:
    """The owner's answer or instruction that opens a follow-up session (`continue_from`): its task, after the
    conversation of the session it continues."""

    text: str


ConversationItem = AssistantTurn | ToolResult | CoreNotice | FollowUp


@dataclass(frozen=True)
class Conversation:
    instructions: str
    task: str
    items: tuple[ConversationItem, ...] = ()

    def with_items(self, *items: ConversationItem) -> Conversation:
        return Conversation(self.instructions, self.task, self.items + items)


@dataclass(frozen=True)
class ModelRequest:
    index: int  # 1-based number of this call in the turn
    conversation: Conversation
    tools: tuple[ToolSpec, ...]  # empty: the final call, answer without tools
    language: str  # the owner's language, for anything the model writes

    @property
    def tools_allowed(self) -> bool:
        return bool(self.tools)


@dataclass(frozen=True)
class Usage:
    input_tokens: int  # the whole prompt, cached part included
    cached_input_tokens: int
    output_tokens: int
    compacted: bool = False  # the adapter compacted the context before this call


@dataclass(frozen=True)
class ModelReply:
    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage


class ModelError(Exception):
    """The model call failed for good; the turn ends as failed with this message."""


class Model(Protocol):
    async def complete(self, request: ModelRequest) -> ModelReply:
        """Make one model call. Raise `ModelError` for a failure that ends the turn."""
        ...
