"""The written contract: docs/core-openapi.json is exactly what the core serves, errors are Problems."""

from __future__ import annotations

import json

import httpx

from contracts.openapi import render
from reference.core.openapi import DOCS_COPY, main, openapi_document

STALE = "docs/core-openapi.json is stale: run `python -m reference.core.openapi > docs/core-openapi.json`"


async def test_the_committed_openapi_document_is_what_the_core_serves(client: httpx.AsyncClient) -> None:
    """The core's OpenAPI document in docs/ is kept current: it equals the served one, byte for byte as exported."""
    served = (await client.get("/openapi.json")).json()
    committed = DOCS_COPY.read_text(encoding="utf-8")

    assert json.loads(committed) == served, STALE
    assert committed == render(openapi_document()), STALE
    assert main(["--check", str(DOCS_COPY)]) == 0


def test_every_error_in_the_document_is_a_problem() -> None:
    """Error bodies are documented as Problem {code, message}; FastAPI's own validation schema is gone."""
    document = openapi_document()
    assert "HTTPValidationError" not in document["components"]["schemas"]
    assert set(document["components"]["schemas"]["Problem"]["required"]) == {"code", "message"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Problem"}, (path, method, status)
    create = document["paths"]["/v1/sessions"]["post"]["responses"]
    assert set(create) == {"200", "201", "400", "409", "422"}
