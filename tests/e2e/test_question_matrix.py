"""Seed 003's release matrix, "Questions — selecting and submitting a structured option works after a live message
repaint", walked end to end over HTTP on the dev server as Iva's page would (R49): a helper asks a structured
question; the live watch shows it; the connection drops and the watch is resumed from its last line; two different
answers arrive at once; exactly one follow-up runs, from the first, and continues the same core session. The same
for a grant of an authorization wait."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from reference.core.script import scripted_task
from tests.e2e.conftest import Stack, core_sessions, finished_row
from tests.e2e.test_api import serving_api

pytestmark = pytest.mark.e2e

# How long one read of a live stream may wait for its next event before the test gives up on it.
EVENT_WAIT_S = 30


def _events(block: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)


async def _live_lines(api: httpx.AsyncClient, path: str, until: str, last_event_id: str | None = None) -> list[Any]:
    """The `line` events of a live watch, as (id, data), read until a line's text contains `until`; then the
    connection is dropped, as a page's is when it repaints or loses the network."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    lines: list[Any] = []
    async with api.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        buffer = ""
        chunks = response.aiter_text()
        while True:
            buffer += await asyncio.wait_for(anext(chunks), EVENT_WAIT_S)
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                fields = _events(block)
                if fields.get("event") != "line":
                    continue
                data = json.loads(fields["data"])
                lines.append((fields["id"], data))
                if until in data["text"]:
                    return lines


async def _walk(stack: Stack, core_db: Path, helper_id: str, script: dict[str, Any], answers: list[dict[str, Any]]):
    """Start, watch until the first line, drop, resume until the outcome, then send `answers` at once."""
    owner = stack.owner
    task = scripted_task("Plan the offsite.", steps=2, step_ms=400, **script)
    async with serving_api(stack) as url, httpx.AsyncClient(base_url=f"{url}/v1/owners/{owner}", timeout=60) as api:
        started = await api.post("/helpers", json={"helper_id": helper_id, "model": "scripted", "task": task})
        assert started.status_code == 201, started.text
        watch = f"/watch?helper_id={helper_id}"
        before = await _live_lines(api, watch, until="admitted")
        # Dropped; the helper goes on. The page comes back with the id of the last line it drew.
        after = await _live_lines(api, watch, until=" · outcome ", last_event_id=before[-1][0])
        seen = [line_id for line_id, _ in before + after]
        assert len(seen) == len(set(seen)), "a line was repeated after the resume"
        texts = [data["text"] for _, data in before + after]
        assert [text for text in texts if "running" in text] == sorted(
            {text for text in texts if "running" in text}, key=texts.index
        ), "a step's line came twice"
        outcome = after[-1][1]
        sent = await asyncio.gather(*(api.post(f"/helpers/{helper_id}/answer", json=body) for body in answers))
    assert [response.status_code for response in sent] == [200] * len(answers), [r.text for r in sent]
    results = [response.json() for response in sent]
    first = [result for result in results if not result["repeated"]]
    assert len(first) == 1, results
    assert all(result["option_id"] == first[0]["option_id"] for result in results), results
    follow_up = first[0]["follow_up"]
    if follow_up is not None:  # a question's answer or a grant: the work goes on from it, once
        name = follow_up["helper_id"]
        row = await finished_row(stack, name, timeout=60)
        assert row.follow_up_of == helper_id
        [continued] = core_sessions(core_db, name)
        question_row = await stack.store.get(owner, helper_id)
        assert question_row is not None and continued["continue_from"] == question_row.session_id
    listed = [row.helper_id for row in await stack.store.reads.views(owner, None)]
    return outcome, first[0], listed


async def test_a_structured_question_survives_a_repaint_and_takes_one_answer(stack: Stack, tmp_path: Path) -> None:
    script = {
        "end": "question",
        "question": "Where shall we meet?",
        "question_id": "venue",
        "options": [("walk", "Walking distance"), ("taxi", "Taxi")],
    }
    answers = [{"question_id": "venue", "option_id": "walk"}, {"question_id": "venue", "option_id": "taxi"}]
    outcome, first, listed = await _walk(stack, tmp_path / "core.sqlite3", "pick-venue", script, answers)
    assert outcome["choices"]["question_id"] == "venue"
    assert [option["id"] for option in outcome["choices"]["options"]] == ["walk", "taxi"]
    assert first["follow_up"]["helper_id"] == "pick-venue.answer"
    assert listed == ["pick-venue", "pick-venue.answer"], "exactly one follow-up"


async def test_an_authorization_wait_survives_a_repaint_and_takes_one_grant(stack: Stack, tmp_path: Path) -> None:
    script = {"end": "authorization", "authorization": "send_mail to bob@example.com"}
    answers = [
        {"question_id": "authorization", "option_id": "grant"},
        {"question_id": "authorization", "option_id": "grant"},
    ]
    outcome, first, listed = await _walk(stack, tmp_path / "core.sqlite3", "offer", script, answers)
    assert outcome["state"] == "unreported" and "authorization" in outcome["text"]
    assert first["option_id"] == "grant" and first["follow_up"]["helper_id"] == "offer.answer"
    assert listed == ["offer", "offer.answer"], "exactly one follow-up"
