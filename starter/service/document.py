"""What the service's OpenAPI document says beyond FastAPI's own: the error statuses of each route (always an
ErrorBody), a live-lines stream's events, and every field of an answer required, so a generated client
(client-typescript/) is as precise as the service. `python -m starter.service.openapi` prints it."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from starter.service.bodies import ErrorBody, ErrorDetail, PendingBody, WatchEvent

Responses = dict[int | str, dict[str, Any]]
RETRY_AFTER_HEADER = {
    "Retry-After": {
        "description": "seconds to wait before asking again (as the body's retry_after_s)",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}


def _error_doc(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    """An error status's entry in the document: its body is always an ErrorBody."""
    return {"model": ErrorBody, "description": description, **({"headers": headers} if headers else {})}


# The statuses of every /v1 route.
ERRORS: Responses = {
    401: _error_doc(
        "unauthorized: no or a wrong service token",
        {"WWW-Authenticate": {"description": "Bearer", "required": True, "schema": {"type": "string"}}},
    ),
    408: _error_doc(
        "request_timeout: the body did not arrive within HELPER_API_READ_TIMEOUT_MS; the connection closes",
        {"Connection": {"description": "close", "required": True, "schema": {"type": "string"}}},
    ),
    413: _error_doc("too_large: the body is over HELPER_API_MAX_BODY_BYTES"),
    422: _error_doc(
        "invalid_request (with `problems`, one per field or parameter, each naming it): the request does not pass "
        "the starter's checks (a limit, an id, a model the core does not offer, the boundary's grammar, a watch's "
        "Last-Event-ID, a body sent without Content-Type: application/json); nothing was written"
    ),
    500: _error_doc("invalid_configuration: the service's own settings (the codec keys)"),
    503: _error_doc(
        "unavailable: the store or Temporal did not answer or accept in time, or the service holds its most "
        "live-lines streams; nothing was taken, asking again is safe",
        RETRY_AFTER_HEADER,
    ),
}
# A route with a JSON body.
BODY: Responses = {
    400: _error_doc("invalid_request: the body is not JSON (not UTF-8, nested too deeply, a number too long to read)")
}
NOT_FOUND: Responses = {404: _error_doc("unknown_helper or unknown_goal: not one of the owner's")}
REFUSED: Responses = {
    409: _error_doc(
        "refused, nothing was written: too_many_open (with `open_ids`), rows_full, goal_needs_open_place, "
        "goal_needs_row_place, not_unreported, not_followable, goal_exists; for `answer`: "
        "not_answerable, stale_question, not_offered, grant_refused, expired, wait_ended"
    )
}
BUSY: Responses = {
    429: _error_doc(
        "busy: refused before anything was sent; ask again after Retry-After (it grows with the backlog)",
        RETRY_AFTER_HEADER,
    )
}
# A read through Temporal (the Goals' Schedules) is never held back by the service's own backlog, only by Temporal.
RATE_LIMITED: Responses = {
    429: _error_doc(
        "busy: Temporal refused the read over its rate limits; ask again after Retry-After", RETRY_AFTER_HEADER
    )
}
# The answers of a write that goes through Temporal's updates beyond done (R48).
WRITE: Responses = {
    202: {"model": PendingBody, "description": "accepted: Temporal took the write; its answer did not come in time"},
    **REFUSED,
    **BUSY,
}


def _frame(event: str, data: str, *, with_id: bool = False) -> dict[str, Any]:
    """One Server-Sent Event of a live-lines stream, as it is sent: its `data` is JSON text of the named schema."""
    properties: dict[str, Any] = {
        "event": {"const": event, "type": "string"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": f"#/components/schemas/{data}"},
        },
    }
    if with_id:
        properties["id"] = {"type": "string"}
    return {"type": "object", "properties": properties, "required": list(properties)}


# A live-lines stream's events as sent (OpenAPI's itemSchema for a sequential media type); WatchEvent is each parsed.
STREAM_CONTENT: dict[str, Any] = {
    "text/event-stream": {
        "itemSchema": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"retry": {"type": "integer", "minimum": 0}},
                    "required": ["retry"],
                },
                _frame("line", "LineEvent", with_id=True),
                _frame("end", "EndEvent"),
                _frame("error", "ErrorBody"),
            ]
        },
    }
}


def _referenced(parts: list[Any], schemas: dict[str, Any]) -> set[str]:
    """The component schemas these parts of the document name, and those they name in turn."""
    found: set[str] = set()
    todo = list(parts)
    while todo:
        part = todo.pop()
        if isinstance(part, dict):
            ref = part.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[1]
                if name not in found:
                    found.add(name)
                    todo.append(schemas[name])
            todo.extend(part.values())
        elif isinstance(part, list):
            todo.extend(part)
    return found


LIVE_LINES: Responses = {
    200: {
        "description": "text/event-stream: `retry: 1000` first, `event: line` (a LineEvent, with its `id:`) for "
        "each change, `event: end` (an EndEvent) last, `event: error` (an ErrorBody) when the store stops "
        "answering; `: ping` comments keep an idle stream open. WatchEvent names each event parsed",
    }
}


def precise_openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, as precise as a generated client needs it (client-typescript/): every error an
    ErrorBody, a live-lines stream's events and their schemas (which no route names as a body), and every field
    of an answer required."""
    if app.openapi_schema is None:
        document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        operations = [operation for item in document["paths"].values() for operation in item.values()]
        for operation in operations:
            for status, response in operation["responses"].items():
                if int(status) >= 400:  # an error is JSON, a live-lines stream's too
                    response["content"] = error_body
            if "text/event-stream" in operation["responses"].get("200", {}).get("content", {}):
                operation["responses"]["200"]["content"] = STREAM_CONTENT
        events = TypeAdapter(WatchEvent).json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(events.pop("$defs", {}))
        schemas["WatchEvent"] = {
            **events,
            "description": "one live-lines event as a client holds it, its `data` parsed as JSON",
        }
        asked = _referenced(
            [operation["requestBody"] for operation in operations if "requestBody" in operation], schemas
        )
        for name, schema in schemas.items():
            # An answer is its model's whole JSON (`result_json`): every field is there, null or not; an error
            # leaves out the details that do not apply.
            if name not in asked and name != ErrorDetail.__name__ and "properties" in schema:
                schema["required"] = list(schema["properties"])
        app.openapi_schema = document
    return app.openapi_schema
