"""eve's ceilings (R14): 80 steps with the 80th call final, the input ceiling checked between calls, compaction,
and the stop explained in the owner's language (R32)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from contracts.core_api import SessionStatus, StopReason
from reference.core.script import scripted_task
from tests.conformance.contract import CoreUnderTest, in_english, in_russian, mentions_number

RUN = {"end": "run", "step_ms": 1, "input_tokens": 100, "input_growth": 10}


def _draft(step: int, to: str) -> dict[str, object]:
    return {"step": step, "tool": "draft_mail", "args": {"to": to, "subject": f"Draft at step {step}"}}


def _explanation(text: str, last_message: str) -> str:
    """The outcome text before the last completed message: the stop explanation."""
    assert last_message and text.rstrip().endswith(last_message.strip()), "the partial outcome ends with the summary"
    return text.rstrip()[: -len(last_message.strip())].strip()


async def test_the_80th_call_is_the_final_one_without_tools(core: CoreUnderTest) -> None:
    """R14: at 80 steps (the request allows 500) the 80th call is already final: no tools, partial, stop steps."""
    tools = [_draft(79, "step79@example.com"), _draft(80, "step80@example.com")]
    session_id = await core.create(scripted_task("Long research", tool_calls=tools, **RUN), max_steps=500)

    final = await core.settled(session_id)

    assert final.status is SessionStatus.PARTIAL
    assert final.outcome is not None and final.outcome.stop_reason is StopReason.STEPS
    assert len(final.steps) == 80
    # Tools were there at call 79 and gone at call 80.
    assert [action.whom for action in final.actions] == ["step79@example.com"]
    explanation = _explanation(final.outcome.text, final.last_message)
    assert in_english(explanation) and mentions_number(explanation, 80), explanation


@pytest.mark.parametrize(("language", "in_language"), [("en", in_english), ("ru", in_russian)])
async def test_a_tighter_step_limit_is_explained_in_the_owners_language(
    core: CoreUnderTest, language: str, in_language: Callable[[str], bool]
) -> None:
    """R14, R32, R1: the request's lower step limit holds, and the partial outcome explains it in en and ru."""
    title = "Долгий поиск" if language == "ru" else "Long search"
    session_id = await core.create(
        scripted_task(title, tool_calls=[_draft(4, "x@example.com")], **RUN), language=language, max_steps=4
    )

    final = await core.settled(session_id)

    assert final.status is SessionStatus.PARTIAL and len(final.steps) == 4 and final.actions == []
    assert final.outcome is not None and final.outcome.stop_reason is StopReason.STEPS
    explanation = _explanation(final.outcome.text, final.last_message)
    assert in_language(explanation), explanation
    assert mentions_number(explanation, 4), explanation


@pytest.mark.parametrize(("language", "in_language"), [("en", in_english), ("ru", in_russian)])
async def test_the_input_ceiling_is_checked_between_calls(
    core: CoreUnderTest, language: str, in_language: Callable[[str], bool]
) -> None:
    """R14, R32: the crossing call runs in full, the next is final without tools; both may exceed the ceiling."""
    tools = [_draft(3, "crossing@example.com"), _draft(4, "final@example.com")]
    task = scripted_task(
        "Read everything", tool_calls=tools, end="run", step_ms=1, input_tokens=1000, input_growth=1000
    )
    session_id = await core.create(task, language=language, max_input_tokens=5000)

    final = await core.settled(session_id)

    # Prompts 1000, 2000, 3000: the third call crosses 5000 (total 6000); the fourth is the final summary.
    assert [step.input_tokens for step in final.steps] == [1000, 2000, 3000, 4000]
    assert final.input_tokens_total == 10_000
    assert final.status is SessionStatus.PARTIAL
    assert final.outcome is not None and final.outcome.stop_reason is StopReason.INPUT
    assert [action.whom for action in final.actions] == ["crossing@example.com"]
    explanation = _explanation(final.outcome.text, final.last_message)
    assert in_language(explanation), explanation
    assert mentions_number(explanation, 5000), explanation


async def test_the_input_ceiling_is_at_most_four_million(core: CoreUnderTest) -> None:
    """R14: a request cannot raise the 4,000,000 cumulative input ceiling (cached input included)."""
    task = scripted_task("Huge prompts", end="run", step_ms=1, input_tokens=1_000_000, input_growth=0, cached_ratio=0.9)
    session_id = await core.create(task, max_input_tokens=50_000_000)

    final = await core.settled(session_id)

    assert final.outcome is not None and final.outcome.stop_reason is StopReason.INPUT
    assert len(final.steps) == 5  # four calls reach 4,000,000; the fifth is the final summary
    assert final.input_tokens_total == 5_000_000


async def test_compaction_keeps_the_counters(core: CoreUnderTest) -> None:
    """R14, R12: compaction lowers the next prompt, but cumulative input keeps growing to the ceiling."""
    task = scripted_task("Compacting", end="run", step_ms=1, input_tokens=1000, input_growth=1000, compact_at=[3])
    session_id = await core.create(task, max_input_tokens=4000)

    final = await core.settled(session_id)

    # 1000, 2000, compacted to 30% (600), 1600 crosses 4000 (total 5200), then the final call.
    assert [step.input_tokens for step in final.steps] == [1000, 2000, 600, 1600, 2600]
    assert [step.compacted for step in final.steps] == [False, False, True, False, False]
    assert final.input_tokens_total == 7800
    assert final.outcome is not None and final.outcome.stop_reason is StopReason.INPUT
