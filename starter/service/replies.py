"""How a command's result or error becomes the service's reply: the console script's JSON (`starter.output`)
with the HTTP status each kind of error carries (`protocol.errors`; the table is in docs/api.md), and the app's
own errors (a body that is not JSON or not valid, an unknown path, a fault) in the same error object
(`contracts.http_service`, the codec server's too)."""

from __future__ import annotations

import asyncio
import email.message
import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from contracts.http_service import plain_error
from domain.ids import echo
from protocol.deadlines import reply_by
from protocol.errors import InvalidRequest, StarterError, Unavailable
from starter.commands import Command
from starter.output import error_json, result_json
from starter.service.context import ARRIVED, service_of

log = logging.getLogger("helper_api")

RETRY_AFTER_S = "1"
# A write's own bound answers it; this much later, the request's timeout would (it never should).
WRITE_BACKSTOP_S = 2.0


def error_response(error: StarterError, inputs: Iterable[str] = (), status: int | None = None) -> JSONResponse:
    status = status or error.http_status
    headers = None
    if status in (429, 503):
        headers = {"Retry-After": str(getattr(error, "retry_after_s", None) or RETRY_AFTER_S)}
    return JSONResponse(error_json(error, list(inputs)), status, headers=headers)


async def reply(
    request: Request,
    build: Callable[[], Command],
    *bodies: Any,
    created: Callable[[Any], bool] | None = None,
) -> Response:
    """Validate (connecting to nothing), connect if need be, run, reply: the console script's steps. A write is
    answered by its own bound (HELPER_STARTER_TIMEOUT_MS from the request's arrival, R48); this timeout only backs
    it up."""
    service = service_of(request)
    try:
        command = build()
        by = reply_by(service.settings, since=request.scope.get(ARRIVED))
        bound = (
            by.left() + WRITE_BACKSTOP_S
            if command.needs_temporal
            else service.settings.service.request_timeout_ms / 1000
        )
        async with asyncio.timeout(bound):
            client = await (service.connections.writer() if command.needs_temporal else service.connections.reader())
            value = await command.run(client, by)
    except StarterError as error:
        return error_response(error, inputs_of(request, *bodies))
    except TimeoutError:
        return error_response(Unavailable(f"no answer within {bound:.0f} s; asking again is safe"))
    status = 201 if created is not None and created(value) else 200
    return JSONResponse(result_json(value), status)


def inputs_of(request: Request, *values: Any) -> list[str]:
    """What the caller sent, so an error echoes none of it whole (`starter.output.safe_text`)."""
    found = [str(value) for value in request.path_params.values()]
    found += [str(value) for value in request.query_params.values()]

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    for value in values:
        walk(value.model_dump() if hasattr(value, "model_dump") else value)
    return found


def add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_exception_handler(StarterError, _refused)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)


async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    problems = _problems(error, request.headers.get("content-type"))
    not_json = any(problem.get("type") == "json_invalid" for problem in error.errors())
    refusal = InvalidRequest("; ".join(problems[:3]), {"problems": problems})
    return error_response(refusal, inputs_of(request), 400 if not_json else 422)


async def _refused(request: Request, error: StarterError) -> JSONResponse:
    return error_response(error, inputs_of(request))  # a refusal before the route ran (a stream's checks)


async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
    if error.status_code == 400:  # the body did not parse as JSON at all: an invalid request, as in `_invalid`
        problem = _unparsed(error.__cause__)
        return error_response(InvalidRequest(problem, {"problems": [problem]}), inputs_of(request), 400)
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
    headers = dict(error.headers or {})
    if error.status_code == 405:  # every method of the path, not only those of the first route that matched
        path = request.url.path
        routes = request.app.routes
        methods = {m for r in routes if isinstance(r, APIRoute) and r.path_regex.match(path) for m in (r.methods or ())}
        headers["Allow"] = ", ".join(sorted(methods))
    return plain_error(error.status_code, code, str(error.detail), headers or None)


async def _unexpected(_: Request, error: Exception) -> JSONResponse:
    log.exception("unexpected error")
    kind = type(error).__name__
    return error_response(Unavailable(f"the starter failed unexpectedly ({kind}); it is safe to ask again"))


# What every body route takes, as a refusal says it.
SEND_JSON = "send a JSON object with Content-Type: application/json"


def _problems(error: RequestValidationError, content_type: str | None) -> list[str]:
    problems = []
    for problem in error.errors():
        if problem.get("type") == "json_invalid":  # its location is the offset, not a field
            problems.append(f"body: not JSON ({problem.get('ctx', {}).get('error', 'it does not parse')})")
            continue
        if tuple(problem.get("loc", ())) == ("body",):  # the body as a whole, in the caller's terms, not pydantic's
            problems.append(_whole_body(problem.get("type"), content_type))
            continue
        where = ".".join(str(part) for part in problem.get("loc", ())[1:]) or "body"
        problems.append(f"{where}: {problem.get('msg', 'is not valid')}")
    return problems


def _whole_body(kind: object, content_type: str | None) -> str:
    """Why the body as a whole was refused: missing, not sent as JSON (FastAPI reads a body as JSON only when its
    Content-Type says so), or JSON that is not an object."""
    if kind == "missing":
        return f"body: missing; {SEND_JSON}"
    if content_type is None:
        return f"body: sent without a Content-Type, so it is not read as JSON; {SEND_JSON}"
    if not _is_json(content_type):
        return f"body: sent as Content-Type {echo(content_type)}, so it is not read as JSON; {SEND_JSON}"
    return f"body: not a JSON object; {SEND_JSON}"


def _is_json(content_type: str) -> bool:
    """Whether FastAPI reads a body of this Content-Type as JSON: application/json or application/<anything>+json."""
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def _unparsed(cause: BaseException | None) -> str:
    """Why a body FastAPI could not read as JSON is not JSON (its bytes, its depth, a number's length)."""
    if isinstance(cause, UnicodeDecodeError):
        return f"body: not JSON in UTF-8 (a bad byte at position {cause.start})"
    if isinstance(cause, RecursionError):
        return "body: not JSON this service reads (nested too deeply)"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return f"body: not JSON this service reads (a number of more than {sys.get_int_max_str_digits()} digits)"
    return "body: not JSON"
