"""How a scripted turn runs: snapshot counters and every way a script can end."""

from __future__ import annotations

import asyncio
import itertools

import httpx

from contracts.core_api import SessionStatus, Snapshot
from reference.core.script import scripted_task
from tests.reference.core.support import FAST, create, settled, snapshot, wait_for


async def test_snapshot_counters_only_grow_while_the_turn_runs(client: httpx.AsyncClient) -> None:
    """R11: every step records its usage; steps and cumulative input only grow; last message follows."""
    session_id = await create(
        client, scripted_task("Count the steps", steps=6, step_ms=30, input_tokens=1000, input_growth=500)
    )
    seen: list[Snapshot] = []
    while not seen or seen[-1].status is SessionStatus.RUNNING:
        seen.append(await snapshot(client, session_id))
        await asyncio.sleep(0.01)

    for earlier, later in itertools.pairwise(seen):
        assert len(later.steps) >= len(earlier.steps)
        assert later.input_tokens_total >= earlier.input_tokens_total
        assert later.steps[: len(earlier.steps)] == earlier.steps
    assert any(0 < len(s.steps) < 6 for s in seen), "the turn was never seen in progress"
    in_progress = next(s for s in seen if 0 < len(s.steps) < 6)
    assert in_progress.last_message.startswith(f"Step {len(in_progress.steps)} of 'Count the steps'")

    final = seen[-1]
    assert final.status is SessionStatus.COMPLETED
    assert [step.index for step in final.steps] == [1, 2, 3, 4, 5, 6]
    assert [step.input_tokens for step in final.steps] == [1000, 1500, 2000, 2500, 3000, 3500]
    assert [step.cached_input_tokens for step in final.steps] == [500, 750, 1000, 1250, 1500, 1750]
    assert {step.output_tokens for step in final.steps} == {300}
    assert final.input_tokens_total == sum(step.input_tokens for step in final.steps)


async def test_a_task_without_a_script_runs_the_defaults_and_completes(client: httpx.AsyncClient) -> None:
    """The scripted model's defaults: three calls, then a summary naming the task's first line."""
    session_id = await create(client, "Summarize the week\nwith details")

    final = await settled(client, session_id)

    assert final.status is SessionStatus.COMPLETED
    assert len(final.steps) == 3
    assert final.steps[0].input_tokens == 2000
    assert final.outcome is not None and final.outcome.kind is SessionStatus.COMPLETED
    assert "Summarize the week" in final.outcome.text
    assert final.last_message == final.outcome.text


async def test_complete_uses_the_scripted_final_text(client: httpx.AsyncClient) -> None:
    """R18: a completed turn's outcome is the model's final message."""
    session_id = await create(client, scripted_task("Final words", steps=2, final_text="All booked.", **FAST))

    final = await settled(client, session_id)

    assert final.status is SessionStatus.COMPLETED
    assert final.outcome is not None and final.outcome.text == "All booked."
    assert final.outcome.stop_reason is None
    assert len(final.steps) == 2


async def test_a_question_pauses_the_session_with_the_question(client: httpx.AsyncClient) -> None:
    """R16: the model asks the owner; the session pauses with the question in the snapshot and outcome."""
    session_id = await create(
        client, scripted_task("Pick a venue", steps=2, end="question", question="Lisbon or Porto?", **FAST)
    )

    paused = await settled(client, session_id)

    assert paused.status is SessionStatus.QUESTION
    assert not paused.status.is_terminal
    assert paused.question == "Lisbon or Porto?"
    assert paused.outcome is not None and "Lisbon or Porto?" in paused.outcome.text
    assert len(paused.steps) == 2
    await asyncio.sleep(0.05)  # five step lengths: a paused session makes no further calls
    assert (await snapshot(client, session_id)).steps == paused.steps


async def test_a_structured_question_pauses_the_session_with_its_choices(client: httpx.AsyncClient) -> None:
    """R49, R16, R32: a question with options carries its id, options and free-text rule in the snapshot, and its
    outcome text lists the options in the owner's language, so a reader of the text alone can answer."""
    options = [("walk", "Walking distance"), ("taxi", "A taxi is fine")]
    task = scripted_task(
        "Pick a venue", steps=1, end="question", question="Walk or taxi?", options=options, free_text=True, **FAST
    )
    named = await settled(client, await create(client, task.replace("Pick", "Choose")))
    russian = await settled(client, await create(client, task, language="ru"))
    unnamed = await settled(client, await create(client, scripted_task("Pick", end="question", options=options)))
    plain = await settled(client, await create(client, scripted_task("Pick", end="question", **FAST)))

    assert named.status is SessionStatus.QUESTION and named.choices is not None
    assert [(option.id, option.label) for option in named.choices.options] == options
    assert named.choices.free_text and not (unnamed.choices and unnamed.choices.free_text)
    assert named.outcome is not None
    assert "Options: Walking distance; A taxi is fine." in named.outcome.text
    assert "your own words" in named.outcome.text
    assert russian.outcome is not None and "Варианты: Walking distance; A taxi is fine." in russian.outcome.text
    assert "своими словами" in russian.outcome.text
    # A question the model did not name gets an id of its session's: never the same for two questions.
    assert unnamed.choices is not None and unnamed.choices.question_id.startswith(unnamed.session_id)
    assert named.choices.question_id != unnamed.choices.question_id
    assert plain.question and plain.choices is None


async def test_a_question_id_given_by_the_script_is_the_snapshots(client: httpx.AsyncClient) -> None:
    """R49: the question's id is the one the model gave."""
    task = scripted_task("Pick", steps=1, end="question", question_id="venue-1", options=[("a", "A")], **FAST)
    paused = await settled(client, await create(client, task))
    assert paused.choices is not None and paused.choices.question_id == "venue-1"


async def test_an_authorization_wait_pauses_the_session_naming_the_action(client: httpx.AsyncClient) -> None:
    """R17: the snapshot says which action waits for authorization."""
    session_id = await create(
        client,
        scripted_task("Book the hotel", steps=3, end="authorization", authorization="pay the hotel deposit", **FAST),
    )

    paused = await settled(client, session_id)

    assert paused.status is SessionStatus.AUTHORIZATION
    assert paused.authorization is not None and paused.authorization.action == "pay the hotel deposit"
    assert paused.authorization.reason
    assert paused.outcome is not None and "pay the hotel deposit" in paused.outcome.text
    assert len(paused.steps) == 3


async def test_a_failing_model_ends_the_session_failed(client: httpx.AsyncClient) -> None:
    """R18: a model failure ends the session failed, with the error; earlier steps stay counted."""
    session_id = await create(client, scripted_task("Doomed", steps=2, end="fail", error="model overloaded", **FAST))

    final = await settled(client, session_id)

    assert final.status is SessionStatus.FAILED
    assert final.error == "model overloaded"
    assert final.outcome is not None and final.outcome.kind is SessionStatus.FAILED
    assert "model overloaded" in final.outcome.text
    assert len(final.steps) == 2


async def test_run_keeps_calling_until_a_ceiling(client: httpx.AsyncClient) -> None:
    """R14: a turn that never ends by itself is stopped by the (request's tighter) step ceiling."""
    session_id = await create(client, scripted_task("Endless", end="run", **FAST), max_steps=5)

    final = await settled(client, session_id)

    assert final.status is SessionStatus.PARTIAL
    assert len(final.steps) == 5


async def test_a_hanging_turn_ignores_finish_and_never_confirms_a_cancel(client: httpx.AsyncClient) -> None:
    """R15, R7: a silent core: after its steps nothing moves, finish-now is ignored, cancel is never confirmed."""
    session_id = await create(client, scripted_task("Silent", steps=2, end="hang", **FAST))
    await wait_for(client, session_id, lambda s: len(s.steps) == 2)

    finish = await client.post(f"/v1/sessions/{session_id}/finish")
    cancels = [(await client.post(f"/v1/sessions/{session_id}/cancel")).json() for _ in range(3)]
    await asyncio.sleep(0.1)  # ten step lengths of silence

    assert finish.status_code == 202
    assert cancels == [{"stopped": False, "status": "running"}] * 3
    current = await snapshot(client, session_id)
    assert current.status is SessionStatus.RUNNING
    assert len(current.steps) == 2
    assert current.finish_requested and current.cancel_requested
    # Reset is cleanup: it still removes the silent session.
    assert (await client.post(f"/v1/sessions/{session_id}/reset")).json() == {"reset": True}
    assert (await client.get(f"/v1/sessions/{session_id}")).status_code == 404


async def test_the_scripted_model_writes_in_the_owners_language(client: httpx.AsyncClient) -> None:
    """R32: what the model writes for a Russian-speaking owner is in Russian."""
    session_id = await create(client, scripted_task("Найти билеты", steps=3, step_ms=40), language="ru")

    progress = await wait_for(client, session_id, lambda s: len(s.steps) == 1)
    final = await settled(client, session_id)

    assert progress.last_message.startswith("Шаг 1 задания «Найти билеты»")
    assert final.outcome is not None and final.outcome.text.startswith("Готово: «Найти билеты»")
