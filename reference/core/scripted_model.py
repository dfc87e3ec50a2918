"""The deterministic "scripted" model: it follows the task's helper-script block (see `script`).

Like a real model in an agent loop, it keeps the turn going by calling tools and ends it by answering
without tools. Progress calls without scripted tool calls search the notes for the task's title. It
never obeys instructions found in untrusted data; it says it saw them instead.

With `recall` (a phrase), every message it writes ends by quoting the first line that mentions the phrase
in what the conversation learned from outside before the session's own task: earlier tasks and
follow-ups, and tool results (never the model's own messages). In a follow-up session (`continue_from`)
that is how a test sees that the earlier conversation was carried: the earlier session learned a fact,
and the follow-up, whose own task does not hold it, quotes it.
"""

from __future__ import annotations

import asyncio
import re

from reference.core.instructions import untrusted_blocks
from reference.core.model import (
    AssistantTurn,
    Conversation,
    ConversationItem,
    FollowUp,
    ModelError,
    ModelReply,
    ModelRequest,
    ToolCall,
    ToolResult,
    Usage,
)
from reference.core.script import Script, ScriptEnd, strip_script, task_title
from reference.core.texts import text
from reference.core.tools import ASK_OWNER, REQUEST_AUTHORIZATION

MODEL_NAME = "scripted"

_INSTRUCTION_LIKE = re.compile(
    r"ignore (all |your |any |the )*(previous |prior )*instructions|system notice to the assistant",
    re.IGNORECASE,
)


def _carries_instructions(tool_result: str) -> bool:
    """Whether untrusted data in a tool result tries to instruct the model (it is never obeyed)."""
    return any(_INSTRUCTION_LIKE.search(block) for block in untrusted_blocks(tool_result))


class ScriptedModel:
    def __init__(self, script: Script, task: str, language: str) -> None:
        self._script = script
        self._task = task
        self._title = task_title(task)
        self._language = language

    async def complete(self, request: ModelRequest) -> ModelReply:
        script = self._script
        past_the_end = request.index > script.steps
        if script.end is ScriptEnd.HANG and past_the_end:
            await asyncio.Event().wait()  # a silent core: no answer ever, only a hard stop ends this
        await asyncio.sleep(script.step_ms / 1000)
        if script.end is ScriptEnd.FAIL and past_the_end:
            raise ModelError(script.error)
        usage = self._usage(request.index)
        reply = self._reply(request, usage)
        if script.recall is None:
            return reply
        return ModelReply(self._with_recall(reply.text, request.conversation), reply.tool_calls, reply.usage)

    def _reply(self, request: ModelRequest, usage: Usage) -> ModelReply:
        script = self._script
        if not request.tools_allowed:
            return ModelReply(self._summary("scripted.summary", request), (), usage)

        calls = [
            ToolCall(call_id=f"call-{request.index}-{position}", name=call.tool, arguments=dict(call.args))
            for position, call in enumerate(script.tool_calls_at(request.index))
        ]
        at_the_end = script.end is not ScriptEnd.RUN and request.index >= script.steps
        if at_the_end and script.end is ScriptEnd.COMPLETE:
            final = script.final_text or self._summary("scripted.done", request)
            return ModelReply(final, (), usage)
        if at_the_end and script.end is ScriptEnd.QUESTION:
            question = text("scripted.question", self._language, title=self._title)
            calls.append(ToolCall(f"call-{request.index}-ask", ASK_OWNER, script.ask_owner_arguments(question)))
        if at_the_end and script.end is ScriptEnd.AUTHORIZATION:
            action = script.authorization or text("scripted.authorization", self._language, title=self._title)
            reason = text("scripted.authorization_reason", self._language)
            calls.append(
                ToolCall(f"call-{request.index}-auth", REQUEST_AUTHORIZATION, {"action": action, "reason": reason})
            )
        if not calls:
            # An agent loop goes on only while the model calls tools, so progress means some research.
            calls.append(ToolCall(f"call-{request.index}-notes", "search_notes", {"query": self._title}))
        return ModelReply(self._progress(request, calls), tuple(calls), usage)

    def _with_recall(self, message: str, conversation: Conversation) -> str:
        phrase = self._script.recall or ""
        line = recalled_line(conversation, phrase, self._task)
        if line is None:
            return f"{message} {text('scripted.not_recalled', self._language, phrase=phrase)}"
        return f"{message} {text('scripted.recalled', self._language, line=line)}"

    def _usage(self, index: int) -> Usage:
        prompt, compacted = self._script.prompt_tokens(index)
        cached = int(prompt * self._script.cached_ratio)
        return Usage(prompt, cached, self._script.output_tokens, compacted)

    def _progress(self, request: ModelRequest, calls: list[ToolCall]) -> str:
        doing = ", ".join(self._doing(call) for call in calls)
        message = text("scripted.progress", self._language, index=request.index, title=self._title, doing=doing)
        if self._saw_injection(request):
            message += " " + text("scripted.injection_seen", self._language)
        return message

    def _doing(self, call: ToolCall) -> str:
        arguments = call.arguments
        match call.name:
            case "search_notes":
                return text("scripted.doing_search_notes", self._language, query=arguments.get("query", ""))
            case "read_mail":
                return text("scripted.doing_read_mail", self._language)
            case "draft_mail" | "send_mail":
                return text(f"scripted.doing_{call.name}", self._language, to=arguments.get("to", "?"))
            case "create_event":
                return text("scripted.doing_create_event", self._language, title=arguments.get("title", "?"))
            case "ask_owner":
                return text("scripted.doing_ask", self._language)
            case "request_authorization":
                return text("scripted.doing_authorization", self._language)
        return text("scripted.doing_nothing", self._language)

    @staticmethod
    def _saw_injection(request: ModelRequest) -> bool:
        """Whether the latest tool results carry instructions inside untrusted data (never obeyed)."""
        latest: list[ToolResult] = []
        for item in reversed(request.conversation.items):
            if isinstance(item, AssistantTurn):
                break
            if isinstance(item, ToolResult):
                latest.append(item)
        return any(_carries_instructions(result.content) for result in latest)

    def _summary(self, key: str, request: ModelRequest) -> str:
        """A final message naming the task, the steps, the actions performed and the refusals (of this session:
        a follow-up's earlier conversation was reported by the session it continues)."""
        own = own_items(request.conversation)
        results = {item.call_id: item.content for item in own if isinstance(item, ToolResult)}
        performed: list[str] = []
        refused: list[str] = []
        for item in own:
            if not isinstance(item, AssistantTurn):
                continue
            for call in item.tool_calls:
                if call.name not in ("draft_mail", "send_mail", "create_event"):
                    continue
                target = str(call.arguments.get("to") or call.arguments.get("title") or "?")
                outcome = results.get(call.call_id, "")
                if outcome.startswith("refused"):
                    refused.append(f"{call.name} → {target}")
                elif not outcome.startswith("error"):
                    performed.append(f"{call.name} → {target}")
        parts = [text(key, self._language, title=self._title, steps=request.index)]
        if performed:
            parts.append(text("scripted.actions", self._language, actions="; ".join(performed)))
        else:
            parts.append(text("scripted.no_actions", self._language))
        if refused:
            parts.append(text("scripted.refusals", self._language, refusals="; ".join(refused)))
        if any(_carries_instructions(content) for content in results.values()):
            parts.append(text("scripted.injection_seen", self._language))
        return " ".join(parts)


RECALLED_LINE_MAX_CHARS = 300


def own_items(conversation: Conversation) -> tuple[ConversationItem, ...]:
    """The items of this session: after the last follow-up (a follow-up session's task), else all of them."""
    items = conversation.items
    for position in range(len(items) - 1, -1, -1):
        if isinstance(items[position], FollowUp):
            return items[position + 1 :]
    return items


def recalled_line(conversation: Conversation, phrase: str, own_task: str) -> str | None:
    """The first line mentioning `phrase` (case-insensitively) in what the conversation learned from outside
    before `own_task`: earlier tasks and follow-ups, and tool results; None when nothing mentions it."""
    texts = [strip_script(conversation.task)] if conversation.task != own_task else []
    for item in conversation.items:
        if isinstance(item, FollowUp) and item.text != own_task:
            texts.append(strip_script(item.text))
        elif isinstance(item, ToolResult):
            texts.append(item.content)
    wanted = phrase.casefold()
    for line in (line.strip() for body in texts for line in body.splitlines()):
        if wanted in line.casefold():
            return line if len(line) <= RECALLED_LINE_MAX_CHARS else line[: RECALLED_LINE_MAX_CHARS - 1] + "…"
    return None
