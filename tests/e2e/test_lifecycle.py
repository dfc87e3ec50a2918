"""A helper's whole life on the dev server with the reference core and chat over real HTTP."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from domain.outcome import OutcomeKind
from domain.rows import RowState
from protocol.errors import HelperRefused, InvalidRequest
from protocol.names import helper_workflow_id
from reference.core.script import scripted_task
from starter.inputs import delivered_request, read_request
from tests.e2e.conftest import Stack
from tests.helpers import eventually, helper_request

pytestmark = pytest.mark.e2e


async def _outcome(stack: Stack, helper_id: str, owner: str | None = None):
    row = await stack.store.get(owner or stack.owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def test_three_run_a_fourth_is_refused_and_each_reaches_its_outcome(stack: Stack):
    """R2, R4, R6, R13, R16, R18, R26: three helpers run at once; a fourth is refused naming the open
    ones; one completes with its actions, one asks a question, one stops at the work ceiling; the chat
    gets a system event for the outcomes."""
    owner = stack.owner
    mail = scripted_task(
        "Mail the Q3 summary to Bob.",
        steps=3,
        step_ms=2_000,
        tool_calls=[
            {"step": 2, "tool": "send_mail", "args": {"to": "bob@example.com", "subject": "Q3", "body": "+12%"}}
        ],
    )
    question = scripted_task(
        "Pick a venue.", steps=2, step_ms=2_000, end="question", question="Walking distance or taxi?"
    )
    # The mail and the venue take seconds, so both are still open when the fourth start comes on a busy machine;
    # the scan's 80 steps take longer still.
    heavy = scripted_task(
        "Scan competitors.",
        end="run",
        steps=80,
        step_ms=200,
        input_tokens=300_000,
        input_growth=0,
        output_tokens=200_000,
    )
    admissions = [
        await stack.client.start(helper_request(owner, "mail", mail, boundary=("send_mail to bob@example.com",))),
        await stack.client.start(helper_request(owner, "venue", question)),
        await stack.client.start(helper_request(owner, "scan", heavy)),
    ]
    assert [a.status for a in admissions] == ["running"] * 3
    # R4: when start returns, the row exists and the helper's workflow runs.
    for helper_id in ("mail", "venue", "scan"):
        assert await stack.store.get(owner, helper_id) is not None
        description = await stack.env.client.get_workflow_handle(helper_workflow_id(owner, helper_id)).describe()
        assert description.status is not None and description.status.name == "RUNNING"

    with pytest.raises(HelperRefused) as refusal:
        await stack.client.start(helper_request(owner, "fourth"))
    assert refusal.value.code == "too_many_open"
    assert sorted(refusal.value.details["open_ids"]) == ["mail", "scan", "venue"]
    assert await stack.store.get(owner, "fourth") is None  # a refusal writes nothing

    done = {h: await eventually(functools.partial(_outcome, stack, h), timeout=30) for h in ("mail", "venue", "scan")}
    assert done["mail"].outcome_kind is OutcomeKind.COMPLETED
    assert [(a.tool, a.whom) for a in done["mail"].actions] == [("send_mail", "bob@example.com")]
    assert done["venue"].outcome_kind is OutcomeKind.QUESTION
    assert "Walking distance or taxi?" in (done["venue"].summary or "")
    assert done["scan"].outcome_kind is OutcomeKind.PARTIAL
    assert done["scan"].work_tokens >= 1_000_000
    assert "work ceiling" in (done["scan"].summary or "")
    for row in done.values():
        assert row.state is RowState.UNREPORTED
        assert row.summary is not None and len(row.summary) <= 1500

    events = await eventually(lambda: _told_about(stack, {"mail", "venue", "scan"}), timeout=30)
    assert all(event["key"].startswith(f"helpers-ready:{owner}:") for event in events)


async def _told_about(stack: Stack, helper_ids: set[str]):
    events = await stack.chat_events()
    told = {h for event in events for h in event["helper_ids"]}
    return events if helper_ids <= told else None


async def test_closing_a_running_helper_holds_its_slot_until_the_core_confirms(stack: Stack):
    """R7, R8, R21, R6: closing a running helper closes its row at once; its slot stays held until the
    core confirms the cancellation; a helper admitted meanwhile waits and then takes exactly that slot."""
    owner = stack.owner
    long = {"end": "run", "steps": 80, "step_ms": 300}
    await stack.client.start(
        helper_request(owner, "slow-stop", scripted_task("Watch inbox.", cancel_delay_ms=2500, **long))
    )
    await stack.client.start(helper_request(owner, "b", scripted_task("Digest.", **long)))
    await stack.client.start(helper_request(owner, "c", scripted_task("Travel.", **long)))
    await eventually(lambda: _has_steps(stack, "slow-stop"))

    answer = await stack.client.close(owner, "slow-stop")
    assert answer.state is RowState.CLOSED and answer.slot_held
    row = await stack.store.get(owner, "slow-stop")
    assert row is not None and row.state is RowState.CLOSED and row.last_message  # kept for manual reading

    waiting = await stack.client.start(helper_request(owner, "next", scripted_task("Calendar.", steps=2, step_ms=100)))
    assert (waiting.status, waiting.ahead) == ("waiting", 0)
    listed = {v.helper_id: v for v in await stack.client.list_helpers(owner)}
    assert listed["next"].state is RowState.WAITING and listed["next"].ahead == 0

    closed = await eventually(lambda: _outcome(stack, "slow-stop"), timeout=20)
    assert closed.outcome_kind is OutcomeKind.CLOSED
    started = await eventually(lambda: _started(stack, "next"), timeout=20)
    assert started.started_at >= closed.finished_at
    assert (await eventually(lambda: _outcome(stack, "next"), timeout=20)).outcome_kind is OutcomeKind.COMPLETED

    # Closing twice is harmless; closing an unknown helper is a clear error (R21).
    again = await stack.client.close(owner, "slow-stop")
    assert again.state is RowState.CLOSED
    with pytest.raises(HelperRefused) as unknown:
        await stack.client.close(owner, "never-was")
    assert unknown.value.code == "unknown_helper"
    for helper_id in ("b", "c"):
        await stack.client.close(owner, helper_id)
    told = {h for event in await stack.chat_events() for h in event["helper_ids"]}
    assert not told & {"slow-stop", "b", "c"}  # closed helpers report nothing automatically


async def _has_steps(stack: Stack, helper_id: str) -> bool:
    row = await stack.store.get(stack.owner, helper_id)
    return row is not None and row.steps >= 2


async def _started(stack: Stack, helper_id: str):
    row = await stack.store.get(stack.owner, helper_id)
    return row if row is not None and row.started_at is not None else None


async def test_same_id_is_idempotent_and_bad_requests_write_nothing(stack: Stack):
    """R5, R9: the same helper id returns the existing helper and creates no second session; malformed
    requests are refused with the field named and leave no row."""
    owner = stack.owner
    task = scripted_task("Quick lookup.", steps=2, step_ms=100)
    first = await stack.client.start(helper_request(owner, "once", task))
    second = await stack.client.start(helper_request(owner, "once", task))
    assert not first.existing and second.existing
    await eventually(lambda: _outcome(stack, "once"), timeout=20)
    rows = await stack.client.list_helpers(owner)
    assert [r.helper_id for r in rows] == ["once"]

    cases: list[tuple[dict[str, Any], str]] = [
        ({"helper_id": "bad id!"}, "helper id"),
        ({"task": "   "}, "task"),
        ({"language": "xx"}, "language"),
        ({"limits": {"deadline_ms": 10**9}}, "deadline_ms"),
        ({"task": "x" * 20_001}, "task"),
        ({"task": "bad \udcff bytes"}, "UTF-8"),
    ]
    for bad, field in cases:
        request = {"owner": owner, "helper_id": "fresh", "task": "ok", "model": "scripted", **bad}
        with pytest.raises(InvalidRequest) as error:
            await stack.client.start(request)
        assert field in str(error.value)
    assert [r.helper_id for r in await stack.client.list_helpers(owner)] == ["once"]


async def test_unreported_read_and_delivered_in_a_turn(stack: Stack):
    """R27, R28: unreported outcomes are listed from the store; reading in a turn delivers nothing until
    that turn answered; then exactly what it read becomes delivered."""
    owner = stack.owner
    for helper_id in ("r1", "r2"):
        await stack.client.start(helper_request(owner, helper_id, scripted_task("Look up.", steps=1, step_ms=50)))
    for helper_id in ("r1", "r2"):
        await eventually(functools.partial(_outcome, stack, helper_id), timeout=20)
    assert {v.helper_id for v in await stack.client.unreported(owner)} == {"r1", "r2"}

    await stack.client.read(read_request(owner, "turn-7", ["r1"]))
    assert {v.helper_id for v in await stack.client.unreported(owner)} == {"r1", "r2"}  # read is not delivered
    with pytest.raises(InvalidRequest):
        await stack.client.delivered(
            delivered_request(owner, "turn-7", answer_chars=0)
        )  # an empty answer delivers nothing
    delivered = await stack.client.delivered(delivered_request(owner, "turn-7", answer_chars=42))
    assert delivered.delivered == ["r1"]
    assert {v.helper_id for v in await stack.client.unreported(owner)} == {"r2"}
    row = await stack.store.get(owner, "r1")
    assert row is not None and row.state is RowState.DELIVERED and row.delivered_at is not None
