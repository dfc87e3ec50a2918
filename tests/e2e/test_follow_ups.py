"""Follow-ups on the dev server: an answered question or a granted authorization continues the same
work in a new helper, without the earlier one holding a slot while the owner thinks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from protocol.errors import HelperRefused
from protocol.names import FOLLOW_UP_OF_MEMO, helper_workflow_id
from reference.core.script import scripted_task
from starter.inputs import answer_request
from tests.e2e.conftest import Stack, core_sessions, finished_row, reference_stack, used_grants
from tests.helpers import eventually, helper_request
from tools.demo.scenario import _cli

pytestmark = pytest.mark.e2e

FACT = "The venue code is ZX-42."


@pytest.fixture
async def base_core_stack(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Stack]:
    """The real stack with a core that does not offer `continue_from`."""
    async with reference_stack(dev_env, tmp_path, offers_follow_ups=False) as built:
        yield built


@pytest.fixture
async def no_grants_stack(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Stack]:
    """The real stack with a core that does not offer `grants`."""
    async with reference_stack(dev_env, tmp_path, offers_grants=False) as built:
        yield built


async def _ask_venue(stack: Stack) -> HelperRow:
    question = scripted_task(
        f"Plan the offsite. {FACT}", steps=2, step_ms=50, end="question", question="Quiet room or terrace?"
    )
    await stack.client.start(helper_request(stack.owner, "venue", question))
    earlier = await finished_row(stack, "venue")
    assert earlier.outcome_kind is OutcomeKind.QUESTION and earlier.state is RowState.UNREPORTED
    return earlier


async def test_an_answered_question_continues_the_same_session_with_what_it_learned(
    stack: Stack, tmp_path: Path
) -> None:
    """The follow-up's own task does not hold the fact; its outcome quotes it, so the core carried the earlier
    conversation. The earlier session was kept (not reset) until the follow-up had its own, then reset."""
    core_db = tmp_path / "core.sqlite3"
    earlier = await _ask_venue(stack)
    [kept] = core_sessions(core_db, "venue")
    assert kept["reset_at"] is None  # kept for a follow-up instead of reset at finalize

    answer = scripted_task("Take the terrace.", steps=1, step_ms=50, recall="venue code")
    admission = await stack.client.start(helper_request(stack.owner, "venue-2", answer, follow_up="venue"))
    assert admission.helper_id == "venue-2" and not admission.existing

    later = await finished_row(stack, "venue-2")
    assert later.outcome_kind is OutcomeKind.COMPLETED
    text = (Path(later.result_dir) / "outcome.md").read_text(encoding="utf-8")
    assert "ZX-42" in text, text
    assert "continued the work of helper venue" in text
    [continued] = core_sessions(core_db, "venue-2")
    assert continued["continue_from"] == earlier.session_id

    # Both rows name each other; the earlier outcome counts as delivered (the answer was the owner's reply).
    first = await stack.store.get(stack.owner, "venue")
    assert first is not None and first.followed_up_by == "venue-2" and first.state is RowState.DELIVERED
    assert later.follow_up_of == "venue"
    shown = await stack.client.show(stack.owner, "venue-2")
    assert shown.follow_up_of == "venue"
    memo = await (
        await stack.env.client.get_workflow_handle(helper_workflow_id(stack.owner, "venue-2")).describe()
    ).memo()
    assert memo[FOLLOW_UP_OF_MEMO] == "venue"
    # Cleanup: the earlier session is reset now that the follow-up has its own (R20).
    [released] = await eventually(
        lambda: [s for s in core_sessions(core_db, "venue") if s["reset_at"] is not None], timeout=10
    )
    assert released["session_id"] == earlier.session_id


async def test_a_granted_authorization_performs_the_action_once_in_the_follow_up(stack: Stack) -> None:
    pay = scripted_task(
        "Mail Bob the signed offer.",
        steps=2,
        step_ms=50,
        end="authorization",
        authorization="send_mail to bob@example.com",
    )
    await stack.client.start(helper_request(stack.owner, "offer", pay))
    earlier = await finished_row(stack, "offer")
    assert earlier.outcome_kind is OutcomeKind.AUTHORIZATION and earlier.actions == []

    granted = scripted_task(
        "Yes, send it.",
        steps=2,
        step_ms=50,
        tool_calls=[
            {"step": 1, "tool": "send_mail", "args": {"to": "bob@example.com", "subject": "Offer", "body": "Signed."}}
        ],
    )
    await stack.client.start(
        helper_request(stack.owner, "offer-2", granted, follow_up="offer", boundary=("send_mail to bob@example.com",))
    )
    later = await finished_row(stack, "offer-2")
    assert later.outcome_kind is OutcomeKind.COMPLETED
    assert [(a.tool, a.whom) for a in later.actions] == [("send_mail", "bob@example.com")]
    text = (Path(later.result_dir) / "outcome.md").read_text(encoding="utf-8")
    assert "bob@example.com" in text


async def _cli_start(stack: Stack, helper_id: str, follow_up: str) -> tuple[int, dict[str, Any]]:
    """`helper-starter start --follow-up`, as Iva calls it."""
    settings = stack.settings.model_copy(
        update={"temporal_address": stack.env.client.service_client.config.target_host}
    )
    arguments = ["start", "--owner", stack.owner, "--id", helper_id, "--model", "scripted"]
    return await _cli(settings, [*arguments, "--task", "Also Q4.", "--follow-up", follow_up])


async def test_only_an_outcome_waiting_for_the_owner_is_followed_up_and_only_once(stack: Stack) -> None:
    done = scripted_task("Find the Q3 report.", steps=1, step_ms=50)
    await stack.client.start(helper_request(stack.owner, "report", done))
    assert (await finished_row(stack, "report")).outcome_kind is OutcomeKind.COMPLETED
    code, answer = await _cli_start(stack, "report-2", "report")
    assert (code, answer["error"]["code"]) == (1, "not_followable"), answer
    assert await stack.store.get(stack.owner, "report-2") is None  # a refusal writes nothing

    closed = scripted_task("Pick a date.", steps=1, step_ms=50, end="question", question="Monday or Tuesday?")
    await stack.client.start(helper_request(stack.owner, "date", closed))
    await finished_row(stack, "date")
    await stack.client.close(stack.owner, "date")
    code, answer = await _cli_start(stack, "date-2", "date")
    assert (code, answer["error"]["code"]) == (1, "not_followable"), answer
    assert "closed" in answer["error"]["message"]

    await _ask_venue(stack)
    first = await stack.client.start(
        helper_request(stack.owner, "venue-2", scripted_task("Terrace.", steps=1, step_ms=50), follow_up="venue")
    )
    again = await stack.client.start(helper_request(stack.owner, "venue-3", "Terrace, please.", follow_up="venue"))
    assert (again.helper_id, again.existing) == (first.helper_id, True)
    assert await stack.store.get(stack.owner, "venue-3") is None

    with pytest.raises(HelperRefused) as unknown:  # another owner's helper is not this owner's to follow up
        # An owner of this test's own: a fixed one's coordinator would outlive the test on its task queue.
        await stack.client.start(helper_request(f"{stack.owner}-other", "x-2", "Terrace.", follow_up="venue"))
    assert unknown.value.code == "unknown_helper"


async def test_a_core_without_continuation_gets_the_earlier_outcome_in_the_task(
    base_core_stack: Stack, tmp_path: Path
) -> None:
    stack = base_core_stack
    core_db = tmp_path / "core.sqlite3"
    earlier = await _ask_venue(stack)
    # Nothing can continue the session on this core: it is reset at finalize, as before follow-ups existed.
    await eventually(lambda: all(s["reset_at"] is not None for s in core_sessions(core_db, "venue")), timeout=10)

    answer = scripted_task("Take the terrace.", steps=1, step_ms=50, hold_until="follow-up-read")
    await stack.client.start(helper_request(stack.owner, "venue-2", answer, follow_up="venue"))
    [session] = await eventually(lambda: [s for s in core_sessions(core_db, "venue-2") if s["request"]], timeout=10)
    assert session["continue_from"] is None
    task = str(session["request"])
    outcome_text = (Path(earlier.result_dir) / "outcome.md").read_text(encoding="utf-8")
    assert "Quiet room or terrace?" in outcome_text and "Quiet room or terrace?" in task
    assert task.index("Quiet room or terrace?") < task.index("Take the terrace.")
    async with httpx.AsyncClient() as http:
        (await http.post(f"{stack.core_url}/v1/demo/latches/follow-up-read/release")).raise_for_status()
    assert (await finished_row(stack, "venue-2")).outcome_kind is OutcomeKind.COMPLETED


async def test_an_answer_sent_as_the_outcome_lands_waits_for_it_instead_of_being_refused(stack: Stack) -> None:
    """The row shows the outcome a moment before the coordinator hears of it: a follow-up admitted in that
    moment waits (at most 5 s) for the notice instead of being refused as "still working"."""
    held = scripted_task(
        "Pick a room.", steps=2, step_ms=50, end="question", question="Big or small?", hold_until="room", hold_at_step=2
    )
    await stack.client.start(helper_request(stack.owner, "room", held))
    answer = scripted_task("Small.", steps=1, step_ms=50)
    admitting = asyncio.create_task(stack.client.start(helper_request(stack.owner, "room-2", answer, follow_up="room")))
    await asyncio.sleep(0.5)
    assert not admitting.done()  # the coordinator waits for room's outcome (at most 5 s)
    async with httpx.AsyncClient() as http:
        (await http.post(f"{stack.core_url}/v1/demo/latches/room/release")).raise_for_status()
    admission = await asyncio.wait_for(admitting, timeout=10)
    assert admission.helper_id == "room-2" and not admission.existing
    assert (await finished_row(stack, "room-2")).outcome_kind is OutcomeKind.COMPLETED


async def test_a_core_without_grants_gets_the_action_granted_in_the_boundary(
    no_grants_stack: Stack, tmp_path: Path
) -> None:
    """R55: a core that cannot perform a grant once gets the action granted as one more boundary item, as before
    grants existed; the narrowed action is still all it may do."""
    stack = no_grants_stack
    asked = "send_mail to bob@example.com, carol@example.com"
    task = scripted_task("Mail the offer.", steps=1, step_ms=50, end="authorization", authorization=asked)
    await stack.client.start(helper_request(stack.owner, "offer", task))
    await finished_row(stack, "offer")

    await stack.client.answer(
        answer_request(stack.owner, "offer", "authorization", option_id="grant", text="send_mail to bob@example.com")
    )
    later = await finished_row(stack, "offer.answer")

    # Sent under the boundary the grant widened, not as a grant: the core recorded no grant's use.
    assert [(a.tool, a.whom) for a in later.actions] == [("send_mail", "bob@example.com")]
    assert used_grants(tmp_path / "core.sqlite3") == []
