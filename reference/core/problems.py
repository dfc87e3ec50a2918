"""Every error the reference core answers is a `Problem` {code, message} naming what is wrong."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from contracts.core_api import Problem

logger = logging.getLogger(__name__)

_LOCATION_KINDS = ("body", "path", "query", "header")

_HTTP_CODES = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed", 415: "unsupported_media_type"}


class CoreProblem(Exception):
    """Raised by the service; answered as a Problem with this status."""

    def __init__(self, status_code: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message


def problem_response(status_code: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(Problem(code=code, message=message).model_dump(), status_code=status_code)


def field_name(location: Sequence[Any]) -> str:
    """("body", "limits", "max_steps") -> "limits.max_steps"; a bare ("body",) stays "body"."""
    parts = [str(part) for part in location]
    if len(parts) > 1 and parts[0] in _LOCATION_KINDS:
        parts = parts[1:]
    return ".".join(parts) or "request"


def describe_validation_errors(errors: Sequence[Any]) -> str:
    described: list[str] = []
    for error in errors:
        field = field_name(error.get("loc", ()))
        kind = error.get("type")
        if kind == "json_invalid":
            reason = error.get("ctx", {}).get("error", "JSON decode error")
            described.append(f"body is not valid JSON ({reason} at position {field})")
        elif kind == "missing":
            described.append(f"{field} is missing")
        elif kind == "extra_forbidden":
            described.append(f"{field} is not a known field")
        else:
            message = str(error.get("msg", "is invalid")).removeprefix("Value error, ")
            described.append(f"{field}: {message}")
    return "; ".join(described)


def install_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(CoreProblem)
    async def _core_problem(request: Request, problem: CoreProblem) -> JSONResponse:
        return problem_response(problem.status_code, problem.code, problem.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return problem_response(422, "invalid_request", describe_validation_errors(error.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(error.status_code, "http_error")
        return problem_response(error.status_code, code, f"{request.method} {request.url.path}: {error.detail}")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        logger.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem_response(500, "internal_error", f"internal error in the reference core: {error}")
