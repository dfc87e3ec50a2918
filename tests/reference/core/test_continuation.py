"""Follow-ups in the reference core: what the model of a follow-up session is given, what is stored
for it and how it is bounded, and that it survives a restart. The contract itself is checked by
tests/conformance/test_continuation.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx

from contracts.core_api import CreateSession, SessionStatus
from reference.core.carried import (
    CARRIED_MAX_CHARS,
    CARRIED_TEXT_MAX_CHARS,
    dump_conversation,
    follow_up_conversation,
    load_conversation,
)
from reference.core.model import AssistantTurn, Conversation, CoreNotice, FollowUp, ModelRequest, ToolCall, ToolResult
from reference.core.openai_model import chat_messages
from reference.core.script import scripted_task
from reference.core.server import running_core
from reference.core.store import SessionStore
from tests.reference.core.support import FAST, create, session_body, settled

BOB_NOTE = "bob@example.com; he prefers mornings"


async def _follow_up(client: httpx.AsyncClient, source_id: str, task: str, **body: Any) -> str:
    request = session_body(task, **body) | {"continue_from": source_id}
    response = await client.post("/v1/sessions", json=request)
    assert response.status_code == 201, response.text
    session_id: str = response.json()["session_id"]
    return session_id


async def test_the_capabilities_name_follow_ups_long_poll_and_grants(client: httpx.AsyncClient) -> None:
    """The reference core advertises every optional part of the contract."""
    response = await client.get("/v1/capabilities")

    assert response.status_code == 200 and response.json() == {"continue_from": True, "long_poll": True, "grants": True}


def test_a_create_without_continue_from_is_sent_as_before() -> None:
    """The new field is left off the wire when unset, so a core that refuses unknown fields still
    accepts every create that is not a follow-up."""
    body = session_body("Plan the offsite")

    request = CreateSession.model_validate(body)

    assert request.model_dump(mode="json") == body
    assert "continue_from" not in request.model_dump_json()
    assert CreateSession.model_validate(body | {"continue_from": "s-1"}).model_dump()["continue_from"] == "s-1"


async def test_a_follow_up_model_gets_the_earlier_conversation_and_the_new_authority(
    recording: tuple[httpx.AsyncClient, dict[str, list[ModelRequest]]],
) -> None:
    """The follow-up's first call carries the earlier task, its tool results (a fact read from the
    notes), an answer to the paused call, then the owner's follow-up; the instructions are the follow-up's own
    boundary. The scripted model quotes the fact it recalls."""
    client, recorded = recording
    search = {"step": 1, "tool": "search_notes", "args": {"query": "Bob"}}
    earlier_task = scripted_task("Set up a call with Bob", steps=1, tool_calls=[search], end="question", **FAST)
    source_id = await create(client, earlier_task, helper_id="earlier")
    assert (await settled(client, source_id)).status is SessionStatus.QUESTION
    answer = scripted_task("Tuesday at 9, please.", steps=1, recall="Bob's address", **FAST)

    follow_up_id = await _follow_up(
        client, source_id, answer, helper_id="later", boundary=("create_event with bob@example.com",)
    )
    done = await settled(client, follow_up_id)

    (first,) = recorded["later"]
    conversation = first.conversation
    assert first.index == 1
    assert conversation.task == earlier_task
    assert "- create_event with bob@example.com" in conversation.instructions
    assert "This session continues an earlier one" in conversation.instructions
    assert conversation.items[-1] == FollowUp(answer)
    results = {item.name: item.content for item in conversation.items if isinstance(item, ToolResult)}
    assert BOB_NOTE in results["search_notes"]
    assert results["ask_owner"].startswith("Paused for the owner")
    assert done.status is SessionStatus.COMPLETED and done.outcome is not None
    assert f"Recalled from earlier: - Bob: Bob's address is {BOB_NOTE}" in done.outcome.text


async def test_a_follow_up_of_a_structured_question_carries_the_options_offered_and_none_of_its_own(
    recording: tuple[httpx.AsyncClient, dict[str, list[ModelRequest]]],
) -> None:
    """R49: the model that continues a structured question sees the options it offered (so an answer naming one
    is understood); the follow-up session's snapshot starts without the earlier question's choices."""
    client, recorded = recording
    options = [("walk", "Walking distance"), ("taxi", "A taxi is fine")]
    asked = scripted_task("Pick a venue", steps=1, end="question", question_id="venue-1", options=options, **FAST)
    source_id = await create(client, asked, helper_id="asked")
    assert (await settled(client, source_id)).choices is not None

    follow_up_id = await _follow_up(client, source_id, scripted_task("walk", steps=1, **FAST), helper_id="answered")
    done = await settled(client, follow_up_id)

    (first,) = recorded["answered"]
    (ask,) = [call for item in first.conversation.items if isinstance(item, AssistantTurn) for call in item.tool_calls]
    assert ask.name == "ask_owner" and ask.arguments["question_id"] == "venue-1"
    assert [(option["id"], option["label"]) for option in ask.arguments["options"]] == options
    assert done.status is SessionStatus.COMPLETED and done.question is None and done.choices is None


def test_the_openai_messages_of_a_follow_up_carry_the_earlier_ones() -> None:
    """The OpenAI-compatible path sends the earlier messages, an answer to every tool call the pause
    left open (a chat API refuses an unanswered one), then the follow-up as a user message."""
    ask = ToolCall("call-2-ask", "ask_owner", {"question": "Which week?"})
    skipped = ToolCall("call-2-later", "search_notes", {"query": "venue"})
    earlier = Conversation(
        instructions="old instructions",
        task="Plan the offsite. The budget code is ZX-4711.",
        items=(
            AssistantTurn("Looking.", (ToolCall("call-1-0", "search_notes", {"query": "offsite"}),)),
            ToolResult("call-1-0", "search_notes", "(no notes found)"),
            AssistantTurn("I need to ask.", (ask, skipped)),
        ),
    )

    stored = dump_conversation(earlier)
    follow_up = follow_up_conversation(load_conversation(stored, "new instructions"), "The second week of May.")
    messages = chat_messages(follow_up)

    assert "old instructions" not in stored
    assert [message["role"] for message in messages] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "tool", "user",
    ]  # fmt: skip
    assert messages[0]["content"] == "new instructions"
    assert "ZX-4711" in messages[1]["content"]
    assert [message["tool_call_id"] for message in messages if message["role"] == "tool"] == [
        "call-1-0", "call-2-ask", "call-2-later",
    ]  # fmt: skip
    assert messages[-1] == {"role": "user", "content": "The second week of May."}


def test_the_stored_conversation_is_bounded() -> None:
    """Each carried text is cut like a row's message, and the whole is bounded: the oldest exchanges
    go first, never leaving a tool result without its call, and a notice says so."""
    big = "x" * (CARRIED_TEXT_MAX_CHARS + 10)
    items: list[AssistantTurn | ToolResult] = []
    for index in range(20):
        items.append(AssistantTurn(f"step {index}", (ToolCall(f"c{index}", "read_mail", {}),)))
        items.append(ToolResult(f"c{index}", "read_mail", big))
    conversation = Conversation("instructions", "the task", tuple(items))

    stored = dump_conversation(conversation)
    loaded = load_conversation(stored, "instructions")

    assert len(stored) < CARRIED_MAX_CHARS + 2 * CARRIED_TEXT_MAX_CHARS
    assert loaded.task == "the task"
    assert isinstance(loaded.items[0], CoreNotice) and "left out" in loaded.items[0].text
    assert isinstance(loaded.items[1], AssistantTurn)
    assert all(len(item.content) <= CARRIED_TEXT_MAX_CHARS for item in loaded.items if isinstance(item, ToolResult))
    assert loaded.items[-1] == ToolResult("c19", "read_mail", big[: CARRIED_TEXT_MAX_CHARS - 1] + "…")


async def test_a_paused_session_is_continued_after_a_restart(tmp_path: Path) -> None:
    """R24: the conversation is stored with the pause, so a follow-up works after the core restarts."""
    db = tmp_path / "core.sqlite3"
    async with running_core(db) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        source_id = await create(client, scripted_task("Plan\nThe room is B-12.", steps=1, end="question", **FAST))
        await settled(client, source_id)

    async with running_core(db) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        follow_up_id = await _follow_up(client, source_id, scripted_task("Yes", steps=1, recall="room", **FAST))
        done = await settled(client, follow_up_id)

    assert done.outcome is not None and "The room is B-12." in done.outcome.text


def test_a_database_from_before_follow_ups_gets_the_new_columns(tmp_path: Path) -> None:
    """A store written by an older reference core opens, and its sessions stay readable."""
    db = tmp_path / "old.sqlite3"
    old = sqlite3.connect(db)
    old.executescript(
        "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, idempotency_key TEXT NOT NULL UNIQUE,"
        " owner TEXT NOT NULL, helper_id TEXT NOT NULL, request TEXT, snapshot TEXT, status TEXT,"
        " created_at TEXT NOT NULL, updated_at TEXT NOT NULL, reset_at TEXT);"
    )
    snapshot = {"session_id": "s-old", "status": "question", "input_tokens_total": 0, "question": "Which?"}
    old.execute(
        "INSERT INTO sessions VALUES ('s-old', 'k-old', 'ada', 'h1', ?, ?, 'question', 'now', 'now', NULL)",
        (json.dumps(session_body("Old task", key="k-old")), json.dumps(snapshot)),
    )
    old.commit()
    old.close()

    store = SessionStore(db)
    try:
        source = store.source("s-old")
        loaded = store.load("s-old")
    finally:
        store.close()

    assert source is not None and source.conversation is None and source.continued_by is None
    assert loaded is not None and loaded.snapshot.status is SessionStatus.QUESTION
