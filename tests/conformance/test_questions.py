"""Structured questions, the contract's optional choices (R49): a question may offer options to pick from, each an
id and a short label, say whether an answer in words is taken too, and name itself with an id.

A core asks one when its `helper-script` model is given `options`, `free_text` or `question_id` with the end
`question`; a core whose model does not know these fields refuses such a script at create, and these checks are
skipped for it (its questions are plain text, which stays valid). The reference core must pass them.
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts.core_api import Problem, QuestionChoices, QuestionOption, SessionStatus, Snapshot
from reference.core.script import scripted_task
from tests.conformance.contract import CoreUnderTest, offering

QUICK = {"step_ms": 5, "input_tokens": 1000, "input_growth": 500}
OPTIONS = [("walk", "Walking distance"), ("taxi", "A taxi is fine"), ("home", "Stay at the office")]


async def _asked(core: CoreUnderTest, core_is_reference: bool, title: str, **script: Any) -> tuple[str, Snapshot]:
    """A session paused on the structured question `script` describes; skipped for a core that asks none."""
    created = await core.create_or_refusal(scripted_task(title, steps=1, end="question", **script, **QUICK))
    if isinstance(created, Problem):
        assert not core_is_reference, f"the reference core asks structured questions: {created.message}"
        pytest.skip(f"this core's scripted model asks no structured questions: {created.message}")
    paused = await core.settled(created)
    assert paused.status is SessionStatus.QUESTION, paused
    return created, paused


async def test_a_structured_question_carries_its_id_options_and_free_text_rule(
    core: CoreUnderTest, core_is_reference: bool
) -> None:
    """R49, R16: the snapshot of the pause carries the question's text and, in `choices`, its id, the options in
    the order given and whether free text is taken; a plain question has no choices (null or left out)."""
    _, asked = await _asked(
        core, core_is_reference, "Pick a venue", question="Walk or taxi?", question_id="venue-1", options=OPTIONS
    )
    _, words = await _asked(core, core_is_reference, "Why", question="Why so late?", free_text=True)
    plain = await core.settled(await core.create(scripted_task("Pick", steps=1, end="question", **QUICK)))

    assert asked.question == "Walk or taxi?"
    assert asked.choices == QuestionChoices(
        question_id="venue-1", options=[QuestionOption(id=i, label=label) for i, label in OPTIONS], free_text=False
    )
    assert words.choices is not None and words.choices.free_text and words.choices.options == []
    assert plain.status is SessionStatus.QUESTION and plain.question and plain.choices is None


async def test_questions_the_model_did_not_name_get_ids_of_their_own(
    core: CoreUnderTest, core_is_reference: bool
) -> None:
    """R49: a question without an id from the model is named by the core, never with another question's id (the
    owner's answer names the question it answers)."""
    _, first = await _asked(core, core_is_reference, "Pick one", options=OPTIONS[:2])
    _, second = await _asked(core, core_is_reference, "Pick one", options=OPTIONS[:2])

    assert first.choices is not None and second.choices is not None
    assert first.choices.question_id != second.choices.question_id


async def test_a_follow_up_of_a_structured_question_starts_without_its_choices(
    core: CoreUnderTest, core_is_reference: bool
) -> None:
    """R49: the session that continues a structured question (`continue_from`) is a new session: its snapshot
    carries no choices until it asks a question of its own, with its own id."""
    await offering(core, "continue_from", core_is_reference)
    source_id, _ = await _asked(core, core_is_reference, "Pick a venue", question_id="venue-1", options=OPTIONS)
    body = core.body(
        scripted_task(
            "Walking distance.", steps=2, step_ms=500, end="question", question_id="venue-2", options=OPTIONS[:1]
        )
    )
    created = await core.http.post("/v1/sessions", json=body | {"continue_from": source_id})
    assert created.status_code == 201, created.text
    follow_up_id: str = created.json()["session_id"]

    running = await core.snapshot(follow_up_id)
    again = await core.settled(follow_up_id)

    assert running.status is SessionStatus.RUNNING and running.choices is None and running.question is None
    assert again.choices is not None and again.choices.question_id == "venue-2"
    assert [option.id for option in again.choices.options] == ["walk"]
