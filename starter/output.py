"""The starter's answers as JSON, for the console script and the HTTP service alike: an answer is its model's
JSON form, an error is `{"error": {"code", "message", ...}}` with echoed inputs cut short and no password (R42)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from domain.ids import ECHO_MAX_CHARS, clip
from protocol.errors import StarterError
from starter.inputs import redact

MESSAGE_MAX_CHARS = 1_000  # a message is cut here whatever it says
PROBLEMS_MAX = 20

_LONG_WORD = re.compile(rf"\S{{{2 * ECHO_MAX_CHARS + 1},}}")


def result_json(value: Any) -> Any:
    """An answer (a model, a list of them, or plain JSON) as plain JSON."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [result_json(item) for item in value]
    return value


def safe_text(text: str, inputs: Sequence[str], shown: Sequence[str] = ()) -> str:
    """A message as it may be shown: echoed inputs cut to a short prefix, no password, bounded length. A long word
    is cut too, unless it holds one of the configured values `shown` (`StarterError.shown`)."""
    for value in sorted({v for v in inputs if len(v) > ECHO_MAX_CHARS}, key=len, reverse=True):
        text = text.replace(repr(value)[1:-1], clip(repr(value)[1:-1])).replace(value, clip(value))

    def cut(match: re.Match[str]) -> str:
        word = match.group(0)
        return word if any(value and value in word for value in shown) else clip(word)

    return clip(_LONG_WORD.sub(cut, redact(text)), MESSAGE_MAX_CHARS)


def error_json(error: StarterError, inputs: Sequence[str]) -> dict[str, Any]:
    """The error's one JSON object; `inputs` are what the caller sent, so none is echoed whole."""
    output = error.as_json()
    body = next(iter(output.values()))  # {"error": …}, or {"pending": …} for a write accepted but not yet answered
    body["message"] = safe_text(str(body.get("message", "")), inputs, error.shown)
    if isinstance(body.get("cause"), str):
        body["cause"] = safe_text(body["cause"], inputs, error.shown)
    if isinstance(body.get("problems"), list):
        body["problems"] = [safe_text(str(problem), inputs) for problem in body["problems"][:PROBLEMS_MAX]]
    return output
