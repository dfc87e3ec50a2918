"""A fake OpenAI-compatible chat-completions server that answers from per-task scripts.

Serve `FakeOpenAI().app` over real HTTP with `reference.core.server.serving`. Each test scripts the
answers for its own task (the first user message), so tests sharing one server never see each other's
replies; every request is recorded with its headers for the test to inspect.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request, Response


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a JSON body (or raw text) with a status, after an optional delay."""

    body: Any = None
    status: int = 200
    raw: str | None = None
    delay_s: float = 0.0


@dataclass(frozen=True)
class Recorded:
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.body["messages"]
        return messages


def completion(
    content: str | None = None,
    *,
    tool_calls: Sequence[tuple[str, dict[str, Any] | str]] = (),
    prompt: int = 1000,
    cached: int | None = 0,
    output: int = 50,
    call_ids: list[str] | None = None,
) -> Reply:
    """A chat completion answering `content` and/or calling tools (name, arguments dict or raw string)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": (call_ids[position] if call_ids else f"call_{position}_{name}"),
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
            for position, (name, arguments) in enumerate(tool_calls)
        ]
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return Reply(
        body={
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": "fake-gpt",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": usage,
        }
    )


def api_error(status: int, message: str, kind: str = "invalid_request_error") -> Reply:
    return Reply(body={"error": {"message": message, "type": kind, "code": None}}, status=status)


@dataclass
class FakeOpenAI:
    scripts: dict[str, list[Reply]] = field(default_factory=dict)
    requests: dict[str, list[Recorded]] = field(default_factory=dict)

    def script(self, task: str, *replies: Reply) -> None:
        self.scripts[task] = list(replies)
        self.requests[task] = []

    @property
    def app(self) -> FastAPI:
        app = FastAPI(title="Fake OpenAI")

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> Response:
            body = await request.json()
            task = next(message["content"] for message in body["messages"] if message["role"] == "user")
            self.requests.setdefault(task, []).append(Recorded(body, dict(request.headers)))
            replies = self.scripts.get(task)
            if not replies:
                return Response(json.dumps({"error": {"message": "fake: no reply scripted"}}), status_code=500)
            reply = replies.pop(0)
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            content = reply.raw if reply.raw is not None else json.dumps(reply.body)
            return Response(content, status_code=reply.status, media_type="application/json")

        return app
