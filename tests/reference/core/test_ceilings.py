"""eve's ceilings in the reference core (R14): steps, cumulative input, compaction, explanations."""

from __future__ import annotations

import httpx

from contracts.core_api import SessionStatus, StopReason
from reference.core.model import ModelRequest
from reference.core.script import scripted_task
from tests.reference.core.support import create, settled

RUN_FAST = {"end": "run", "step_ms": 1, "input_tokens": 100, "input_growth": 10}


async def test_the_80th_call_is_the_final_one_without_tools(
    recording: tuple[httpx.AsyncClient, dict[str, list[ModelRequest]]],
) -> None:
    """R14: at 80 steps (even if the request allows more) the 80th call has no tools and ends partial."""
    client, recorded = recording
    session_id = await create(client, scripted_task("Long research", **RUN_FAST), helper_id="steps-80", max_steps=500)

    final = await settled(client, session_id)

    assert final.status is SessionStatus.PARTIAL
    assert final.outcome is not None and final.outcome.stop_reason is StopReason.STEPS
    assert len(final.steps) == 80
    requests = recorded["steps-80"]
    assert [request.index for request in requests] == list(range(1, 81))
    assert all(request.tools_allowed for request in requests[:79])
    assert not requests[79].tools_allowed
    explanation = "I stopped at the step ceiling of 80 steps, so this is a partial outcome."
    assert final.outcome.text.startswith(explanation)
    # Followed by the last completed message: the final call's summary.
    assert final.outcome.text == f"{explanation}\n\n{final.last_message}"
    assert final.last_message.startswith("Summary of 'Long research' after 80 steps.")


async def test_a_tool_call_at_the_final_step_is_not_made(client: httpx.AsyncClient) -> None:
    """R14: the final call has no tools, so even an authorized send scheduled for it never happens."""
    send = {"step": 3, "tool": "send_mail", "args": {"to": "bob@example.com", "subject": "Report"}}
    session_id = await create(
        client,
        scripted_task("Send at the end", tool_calls=[send], **RUN_FAST),
        boundary=("send_mail to bob@example.com",),
        max_steps=3,
    )

    final = await settled(client, session_id)

    assert final.status is SessionStatus.PARTIAL
    assert len(final.steps) == 3
    assert final.actions == []


async def test_the_step_ceiling_is_explained_in_russian(client: httpx.AsyncClient) -> None:
    """R14, R32: the stop explanation is in the owner's language."""
    session_id = await create(client, scripted_task("Долгий поиск", **RUN_FAST), language="ru", max_steps=4)

    final = await settled(client, session_id)

    assert final.outcome is not None and final.outcome.stop_reason is StopReason.STEPS
    assert final.outcome.text.startswith("Я остановился на пределе шагов (4), поэтому это частичный итог.")
    assert final.outcome.text.endswith(final.last_message)
    assert final.last_message.startswith("Итог задания «Долгий поиск»")


async def test_the_input_ceiling_is_checked_between_calls(
    recording: tuple[httpx.AsyncClient, dict[str, list[ModelRequest]]],
) -> None:
    """R14: the crossing call runs in full, the next call is final without tools, both may exceed."""
    client, recorded = recording
    task = scripted_task("Read everything", end="run", step_ms=1, input_tokens=1000, input_growth=1000)
    session_id = await create(client, task, helper_id="input-ceiling", max_input_tokens=5000)

    final = await settled(client, session_id)

    # Prompts 1000, 2000, 3000: the third call crosses 5000 (total 6000); the fourth is the summary.
    assert [step.input_tokens for step in final.steps] == [1000, 2000, 3000, 4000]
    assert final.input_tokens_total == 10_000
    assert final.status is SessionStatus.PARTIAL
    assert final.outcome is not None and final.outcome.stop_reason is StopReason.INPUT
    assert final.outcome.text.startswith(
        "I stopped at the ceiling of 5000 cumulative input tokens, so this is a partial outcome.\n\n"
    )
    assert [request.tools_allowed for request in recorded["input-ceiling"]] == [True, True, True, False]


async def test_the_input_ceiling_is_at_most_four_million(client: httpx.AsyncClient) -> None:
    """R14: a request cannot raise the core's 4,000,000 input ceiling."""
    task = scripted_task("Huge prompts", end="run", step_ms=1, input_tokens=1_000_000, input_growth=0)
    session_id = await create(client, task, max_input_tokens=50_000_000)

    final = await settled(client, session_id)

    assert final.outcome is not None and final.outcome.stop_reason is StopReason.INPUT
    assert len(final.steps) == 5  # four calls reach 4,000,000; the fifth is the final summary


async def test_compaction_lowers_the_prompt_but_keeps_the_counter(client: httpx.AsyncClient) -> None:
    """R14, R12: after compaction the prompt falls, but cumulative input keeps growing to the ceiling."""
    task = scripted_task("Compacting", end="run", step_ms=1, input_tokens=1000, input_growth=1000, compact_at=[3])
    session_id = await create(client, task, max_input_tokens=4000)

    final = await settled(client, session_id)

    # 1000, 2000, then compacted to 30% (600), 1600 crosses 4000 (total 5200), then the final call.
    assert [step.input_tokens for step in final.steps] == [1000, 2000, 600, 1600, 2600]
    assert [step.compacted for step in final.steps] == [False, False, True, False, False]
    assert final.input_tokens_total == sum(step.input_tokens for step in final.steps) == 7800
    assert final.outcome is not None and final.outcome.stop_reason is StopReason.INPUT
