"""A model adapter for any OpenAI-compatible chat-completions API, over httpx.

Each model call is one `POST {base_url}/chat/completions`:

- `messages`: the system message is the core's instructions (the helper block, R33), the first user
  message is the task, then the turn so far: assistant messages with their `tool_calls`, one `tool`
  message per result (content from mail, notes and pages arrives wrapped as untrusted data by the
  tools, exactly as the scripted model sees it), the core's notices as user messages marked as
  coming from the core (some servers refuse a system message after the first), and in a follow-up
  session (`continue_from`) the earlier session's messages followed by the owner's follow-up as a user
  message.
- `tools`: the JSON schemas of the core's tools. The final call after a ceiling or finish-now sends
  no `tools` at all (R14); tool calls the model still makes in that answer are dropped.

The answer's `usage` becomes the step's usage: `prompt_tokens` is the whole prompt (cached part
included, which is what the input ceiling counts), `prompt_tokens_details.cached_tokens` the cached
part, `completion_tokens` the output. An answer without usage is an error, because the core cannot
enforce its input ceiling without it. The adapter does not compact.

The engine owns the loop, the ceilings and authority: an irreversible tool the model asks for outside
the boundary is refused by the tools whatever the model says (R33). Errors end the turn `failed`
with a text naming what went wrong: 408, 429, 5xx, timeouts and transport errors are retried a
bounded number of times with a doubling backoff; other 4xx answers and answers that are not a chat
completion fail at once.

Configuration (see `reference.core.__main__` and docs/reference-core.md): a base URL, an optional
API key and one or more model names; each is offered as `openai:<model>`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reference.core.model import (
    AssistantTurn,
    Conversation,
    CoreNotice,
    FollowUp,
    ModelError,
    ModelReply,
    ModelRequest,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)

logger = logging.getLogger(__name__)

CATALOG_PREFIX = "openai:"

ENV_BASE_URL = "REFERENCE_CORE_OPENAI_BASE_URL"
ENV_API_KEY = "REFERENCE_CORE_OPENAI_API_KEY"
ENV_MODEL = "REFERENCE_CORE_OPENAI_MODEL"
ENV_TIMEOUT_S = "REFERENCE_CORE_OPENAI_TIMEOUT_S"
ENV_MAX_RETRIES = "REFERENCE_CORE_OPENAI_MAX_RETRIES"

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_RETRY_BACKOFF_S = 1.0

# Answers worth another attempt besides 5xx: a request timeout and rate limiting.
_RETRYABLE_4XX = frozenset({408, 429})
_EXCERPT_CHARS = 300
CORE_NOTICE_PREFIX = "Notice from the core (not from the owner or any data): "


@dataclass(frozen=True)
class OpenAIConfig:
    """Where the OpenAI-compatible API is and which of its models the core offers."""

    base_url: str
    models: tuple[str, ...]
    api_key: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S  # bound on each attempt, connect to last byte
    max_retries: int = DEFAULT_MAX_RETRIES  # further attempts after a retryable failure
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S  # first pause between attempts; doubles

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"the OpenAI base URL must start with http:// or https://, not {self.base_url!r}")
        if not self.models or any(not model or model != model.strip() for model in self.models):
            raise ValueError("name at least one OpenAI model (e.g. gpt-4o-mini), without blanks around it")
        if self.timeout_s <= 0:
            raise ValueError(f"the OpenAI timeout must be positive, not {self.timeout_s}")
        if self.max_retries < 0:
            raise ValueError(f"the OpenAI retries must be 0 or more, not {self.max_retries}")

    @property
    def completions_url(self) -> str:
        return f"{self.base_url.rstrip('/')}/chat/completions"

    @property
    def catalog_names(self) -> dict[str, str]:
        """Catalog name -> the API's model name: `openai:gpt-4o-mini` -> `gpt-4o-mini`."""
        return {f"{CATALOG_PREFIX}{model}": model for model in self.models}


def openai_config(
    base_url: str | None,
    models: str | Sequence[str] | None,
    api_key: str | None = None,
    timeout_s: float | None = None,
    max_retries: int | None = None,
) -> OpenAIConfig | None:
    """The configuration, or None when no base URL is set (then no OpenAI model is offered).

    `models` may be one comma-separated string ("gpt-4o-mini,gpt-4o"). Raises ValueError naming what
    is wrong, e.g. a base URL without a model.
    """
    if not base_url:
        return None
    names = models.split(",") if isinstance(models, str) else list(models or ())
    names = [name.strip() for name in names if name.strip()]
    if not names:
        raise ValueError(f"{ENV_MODEL} (or --openai-model) is required when {ENV_BASE_URL} is set")
    return OpenAIConfig(
        base_url=base_url,
        models=tuple(names),
        api_key=api_key or None,
        timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
        max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
    )


# Mapping the conversation and the tools to the chat-completions request.


def chat_messages(conversation: Conversation) -> list[dict[str, Any]]:
    """The conversation as chat messages: system, user (the task), then the turn so far."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": conversation.instructions},
        {"role": "user", "content": conversation.task},
    ]
    for item in conversation.items:
        if isinstance(item, AssistantTurn):
            message: dict[str, Any] = {"role": "assistant", "content": item.text or None}
            if item.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
                    }
                    for call in item.tool_calls
                ]
            elif not item.text:
                message["content"] = ""
            messages.append(message)
        elif isinstance(item, ToolResult):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.content})
        elif isinstance(item, CoreNotice):
            messages.append({"role": "user", "content": CORE_NOTICE_PREFIX + item.text})
        elif isinstance(item, FollowUp):
            messages.append({"role": "user", "content": item.text})
    return messages


def chat_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
        }
        for tool in tools
    ]


def request_body(model: str, request: ModelRequest) -> dict[str, Any]:
    """The chat-completions body of one call; a final call (no tools) carries no `tools` key (R14)."""
    body: dict[str, Any] = {"model": model, "messages": chat_messages(request.conversation)}
    if request.tools:
        body["tools"] = chat_tools(request.tools)
    return body


# Reading the answer.


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Function(_Lenient):
    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] | None = None


class _ToolCall(_Lenient):
    id: str | None = None
    function: _Function


class _Message(_Lenient):
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(_Lenient):
    message: _Message


class _PromptDetails(_Lenient):
    cached_tokens: int | None = Field(default=None, ge=0)


class _Usage(_Lenient):
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    prompt_tokens_details: _PromptDetails | None = None


class _Completion(_Lenient):
    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT_CHARS else text[: _EXCERPT_CHARS - 1] + "…"


def _api_error_message(response: httpx.Response) -> str:
    """The `error.message` of an OpenAI-style error body, or an excerpt of whatever came back."""
    try:
        data = response.json()
    except ValueError:
        return _excerpt(response.text) or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _excerpt(error["message"])
        if isinstance(error, str):
            return _excerpt(error)
    return _excerpt(response.text)


def _text_of(content: str | list[dict[str, Any]] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if part.get("type") in ("text", "output_text"))


def _tool_call(call: _ToolCall, index: int, position: int) -> ToolCall:
    call_id = call.id or f"call-{index}-{position}"
    raw = call.function.arguments
    if isinstance(raw, dict):
        return ToolCall(call_id, call.function.name, raw)
    if raw is None or not raw.strip():
        return ToolCall(call_id, call.function.name, {})
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as error:
        return ToolCall(call_id, call.function.name, {}, arguments_error=f"the arguments are not valid JSON ({error})")
    if not isinstance(arguments, dict):
        return ToolCall(call_id, call.function.name, {}, arguments_error="the arguments are not a JSON object")
    return ToolCall(call_id, call.function.name, arguments)


def parse_completion(data: Any, request: ModelRequest) -> ModelReply:
    """The reply in a chat-completions answer.

    Raises ModelError with a phrase that follows "the model API at URL", naming what is wrong.
    """
    if isinstance(data, dict) and "choices" not in data and data.get("error"):
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise ModelError(f"answered with an error: {_excerpt(str(message))}")
    try:
        completion = _Completion.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'answer'}: {problem['msg']}"
            for problem in error.errors()[:3]
        )
        raise ModelError(f"answered with something that is not a chat completion ({problems})") from None
    if completion.usage is None:
        raise ModelError("answered without usage, which the core needs to enforce its input ceiling")
    message = completion.choices[0].message
    calls: tuple[ToolCall, ...] = ()
    if request.tools_allowed and message.tool_calls:
        calls = tuple(_tool_call(call, request.index, position) for position, call in enumerate(message.tool_calls))
    usage = completion.usage
    prompt = usage.prompt_tokens
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else None
    return ModelReply(
        text=_text_of(message.content).strip(),
        tool_calls=calls,
        usage=Usage(prompt, min(cached or 0, prompt), usage.completion_tokens),
    )


class OpenAIChatModel:
    """One session's model: `model` at the configured OpenAI-compatible API."""

    def __init__(self, config: OpenAIConfig, model: str) -> None:
        self._config = config
        self._model = model

    async def complete(self, request: ModelRequest) -> ModelReply:
        data = await self._post(request_body(self._model, request))
        try:
            return parse_completion(data, request)
        except ModelError as error:
            raise ModelError(f"the model API at {self._config.completions_url} {error}") from None

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if self._config.api_key:
            headers["authorization"] = f"Bearer {self._config.api_key}"
        return headers

    async def _post(self, body: dict[str, Any]) -> Any:
        """POST with bounded retries; the decoded JSON of a 2xx answer, or ModelError."""
        config = self._config
        url = config.completions_url
        attempts = config.max_retries + 1
        failure = "failed"
        async with httpx.AsyncClient(timeout=config.timeout_s, headers=self._headers()) as http:
            for attempt in range(1, attempts + 1):
                try:
                    async with asyncio.timeout(config.timeout_s):
                        response = await http.post(url, json=body)
                except (TimeoutError, httpx.TimeoutException):
                    failure = f"did not answer within {config.timeout_s:g} s"
                except httpx.TransportError as error:
                    failure = f"could not be reached ({type(error).__name__}: {_excerpt(str(error)) or 'no detail'})"
                else:
                    status = response.status_code
                    if status >= 500 or status in _RETRYABLE_4XX:
                        failure = f"answered {status} {response.reason_phrase}: {_api_error_message(response)}"
                    elif status >= 400:
                        raise ModelError(
                            f"the model API at {url} refused the call with {status} {response.reason_phrase}: "
                            f"{_api_error_message(response)}"
                        )
                    else:
                        try:
                            return response.json()
                        except ValueError:
                            raise ModelError(
                                f"the model API at {url} answered {status} with a body that is not JSON: "
                                f"{_excerpt(response.text) or '(empty body)'}"
                            ) from None
                logger.warning("model call to %s attempt %d of %d %s", url, attempt, attempts, failure)
                if attempt < attempts:
                    await asyncio.sleep(config.retry_backoff_s * 2 ** (attempt - 1))
        raise ModelError(f"the model API at {url} {failure} (gave up after {attempts} attempts)")
