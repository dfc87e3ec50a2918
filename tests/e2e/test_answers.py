"""Answers on the dev server (R49): a helper's structured question or authorization wait takes one authoritative
answer, and the work goes on from it in a follow-up that continues the same core session."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from domain.audit import WaitEndKind, shown_digest
from domain.boundary import GrantedAction
from domain.messages.updates import AnswerResult, Decider
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from protocol.errors import HelperRefused, InvalidRequest
from protocol.names import coordinator_id
from reference.core.script import scripted_task
from starter.inputs import answer_request, delivered_request, read_request
from tests.e2e.conftest import Stack, core_sessions, finished_row, used_grants
from tests.e2e.test_api import serving_api
from tests.helpers import helper_request
from tools.demo.scenario import _cli
from workflows import coordinator

pytestmark = pytest.mark.e2e

OPTIONS = [("walk", "Walking distance"), ("taxi", "Taxi")]
ACTION = "send_mail to bob@example.com"


async def _ask(stack: Stack, helper_id: str, **script: Any) -> HelperRow:
    task = scripted_task("Plan the offsite.", steps=2, step_ms=50, **script)
    await stack.client.start(helper_request(stack.owner, helper_id, task, boundary=("send_mail to anna@example.com",)))
    return await finished_row(stack, helper_id)


def _one_first(answers: list[AnswerResult]) -> tuple[AnswerResult, AnswerResult]:
    """Of two answers sent at once, exactly one is the first; the other gets it back."""
    [first] = [a for a in answers if not a.repeated]
    [later] = [a for a in answers if a.repeated]
    assert not later.same
    assert (later.option_id, later.text) == (first.option_id, first.text)
    return first, later


async def test_two_answers_at_once_start_one_follow_up_that_continues_the_session(stack: Stack, tmp_path: Path) -> None:
    """R49, seed 003 "Questions": two different answers at once (a double tap, a second device): one is
    authoritative, one follow-up runs from it and continues the same core session; a later answer gets the first
    back and starts nothing."""
    core_db = tmp_path / "core.sqlite3"
    question = await _ask(stack, "pick-venue", end="question", question="Where?", options=OPTIONS, question_id="venue")
    assert question.outcome_kind is OutcomeKind.QUESTION and question.choices is not None

    answers = await asyncio.gather(
        stack.client.answer(answer_request(stack.owner, "pick-venue", "venue", option_id="walk")),
        stack.client.answer(answer_request(stack.owner, "pick-venue", "venue", option_id="taxi")),
    )
    first, later = _one_first(list(answers))
    assert first.follow_up is not None and later.follow_up is not None
    assert first.follow_up.helper_id == later.follow_up.helper_id == "pick-venue.answer"
    label = dict(OPTIONS)[first.option_id or ""]

    follow_up = await finished_row(stack, "pick-venue.answer")
    assert follow_up.outcome_kind is OutcomeKind.COMPLETED
    assert label in follow_up.task and follow_up.model == question.model
    assert follow_up.boundary == ["send_mail to anna@example.com"]
    [continued] = core_sessions(core_db, "pick-venue.answer")
    assert continued["continue_from"] == question.session_id

    # show links both ways; the question's outcome counts as delivered.
    shown = await stack.client.show(stack.owner, "pick-venue")
    assert shown.followed_up_by == "pick-venue.answer" and shown.state is RowState.DELIVERED
    assert shown.session_id is not None and shown.session_id == question.session_id  # its session in the core
    assert (await stack.client.show(stack.owner, "pick-venue.answer")).follow_up_of == "pick-venue"

    third = await stack.client.answer(answer_request(stack.owner, "pick-venue", "venue", option_id=first.option_id))
    assert third.repeated and third.same and third.option_id == first.option_id
    other = await stack.client.answer(
        answer_request(stack.owner, "pick-venue", "venue", option_id="taxi" if label != "Taxi" else "walk")
    )
    assert other.repeated and not other.same and other.option_id == first.option_id
    assert [r.helper_id for r in await stack.client.list_helpers(stack.owner)] == ["pick-venue", "pick-venue.answer"]
    assert len(core_sessions(core_db, "pick-venue.answer")) == 1


async def test_a_grant_admits_the_follow_up_with_the_item_asked_for_once(stack: Stack, tmp_path: Path) -> None:
    """R41, R49, R55: an authorization wait takes grant or deny; a grant's follow-up carries the item the core named
    to the core as a grant performed once, beside its unchanged boundary; of a grant and a deny sent at once one is
    the answer."""
    core_db = tmp_path / "core.sqlite3"
    waiting = await _ask(stack, "offer", end="authorization", authorization=ACTION)
    assert waiting.outcome_kind is OutcomeKind.AUTHORIZATION

    answers = await asyncio.gather(
        stack.client.answer(answer_request(stack.owner, "offer", "authorization", option_id="grant")),
        stack.client.answer(answer_request(stack.owner, "offer", "authorization", option_id="grant")),
        stack.client.answer(answer_request(stack.owner, "offer", "authorization", option_id="deny")),
    )
    firsts = [a for a in answers if not a.repeated]
    assert len(firsts) == 1
    first = firsts[0]
    assert all(a.option_id == first.option_id for a in answers)
    if first.option_id == "grant":
        follow_up = await finished_row(stack, "offer.answer")
        assert follow_up.boundary == ["send_mail to anna@example.com"]
        assert follow_up.granted_action == GrantedAction(action=ACTION, asked=ACTION)
        assert follow_up.outcome_kind is OutcomeKind.COMPLETED
        # The granted action is performed, and the outcome says so.
        assert [(a.tool, a.whom) for a in follow_up.actions] == [("send_mail", "bob@example.com")]
        assert "No actions were performed" not in (follow_up.summary or "")
        [continued] = core_sessions(core_db, "offer.answer")
        assert continued["continue_from"] == waiting.session_id
        # The core performed it under the grant, once: the boundary alone did not allow it.
        assert used_grants(core_db) == [continued["session_id"]]
    else:
        assert await stack.store.get(stack.owner, "offer.answer") is None
    row = await stack.store.get(stack.owner, "offer")
    assert row is not None and row.state is RowState.DELIVERED
    # One record of the one end (R56): what was asked, what was granted, against exactly what was shown.
    [record] = await stack.store.reads.wait_records(stack.owner, helper_id="offer")
    assert record.ended is (WaitEndKind.GRANTED if first.option_id == "grant" else WaitEndKind.DENIED)
    assert record.asked_grant == ACTION and record.granted == (ACTION if first.option_id == "grant" else None)
    assert record.shown_text == waiting.summary and record.shown_sha256 == shown_digest(waiting.summary or "", None)


async def test_a_grant_narrowed_to_one_recipient_sends_to_that_one_once_and_a_wider_one_is_refused(
    stack: Stack, tmp_path: Path
) -> None:
    """R55: asked to mail two recipients, the owner first tries to add a third (refused, naming it, nothing written),
    then grants one: the follow-up sends one mail, to that one, and its model's second try is refused grant_used;
    show, the answer and the record give asked beside granted."""
    asked = "send_mail to bob@example.com, carol@example.com"
    # The follow-up's model mails Carol, then tries once more.
    mail = {"tool": "send_mail", "args": {"to": "carol@example.com", "subject": "Booked", "body": "See you there."}}
    twice = {"steps": 3, "step_ms": 50, "tool_calls": [{"step": 1, **mail}, {"step": 2, **mail}]}
    await _ask(stack, "notify", end="authorization", authorization=asked, follow_up=twice)

    with pytest.raises(HelperRefused) as wider:
        await stack.client.answer(
            answer_request(stack.owner, "notify", "authorization", option_id="grant", text=f"{asked}, dave@example.com")
        )
    assert wider.value.code == "grant_widens" and "dave@example.com" in str(wider.value)
    assert await stack.store.get(stack.owner, "notify.answer") is None

    narrowed = answer_request(
        stack.owner, "notify", "authorization", option_id="grant", text="Send mail to CAROL@example.com"
    )
    first = await stack.client.answer(narrowed)
    assert first.follow_up is not None and not first.repeated
    assert (first.asked, first.granted) == (asked, "send_mail to carol@example.com")
    plain = await stack.client.answer(answer_request(stack.owner, "notify", "authorization", option_id="grant"))
    assert plain.repeated and not plain.same and plain.text == "Send mail to CAROL@example.com"

    follow_up = await finished_row(stack, "notify.answer")
    assert follow_up.granted_action == GrantedAction(action="send_mail to carol@example.com", asked=asked)
    assert "bob@" not in follow_up.task
    outcome = (Path(follow_up.result_dir) / "outcome.md").read_text(encoding="utf-8")
    assert f"The owner granted, to be done once: send_mail to carol@example.com (asked for: {asked})" in outcome
    assert [(a.tool, a.whom) for a in follow_up.actions] == [("send_mail", "carol@example.com")]
    assert "(grant_used)" in outcome and "carol@example.com" in outcome  # the second try, refused by the core
    [record] = await stack.store.reads.wait_records(stack.owner, helper_id="notify")
    assert (record.asked_grant, record.granted) == (asked, "send_mail to carol@example.com")
    [session] = core_sessions(tmp_path / "core.sqlite3", "notify.answer")
    assert used_grants(tmp_path / "core.sqlite3") == [session["session_id"]]


async def test_an_outcome_says_its_question_or_its_authorization_once_and_not_the_cleanups_cancel(
    stack: Stack,
) -> None:
    """R16, R17: a question's options are listed once (the runtime's list, not also the core's), and a helper that
    waits for authorization says what it waits for, not that its turn was cancelled (the runtime's cleanup cancels
    the paused turn)."""
    question = await _ask(stack, "pick", end="question", question="Where?", options=OPTIONS, question_id="venue")
    summary = question.summary or ""
    assert summary.count("Walking distance") == 1 and summary.count("Taxi") == 1, summary
    waiting = await _ask(stack, "pay", end="authorization", authorization=ACTION)
    summary = waiting.summary or ""
    assert "needs authorization" in summary and ACTION in summary, summary
    assert "cancelled" not in summary.lower(), summary


async def test_a_deny_starts_nothing_and_delivers_the_outcome(stack: Stack, tmp_path: Path) -> None:
    await _ask(stack, "invite", end="authorization", authorization=ACTION)
    await stack.client.read(read_request(stack.owner, "t-1", ["invite"]))
    await stack.client.delivered(delivered_request(stack.owner, "t-1", answer_chars=40))
    by = Decider(by="owner", via="telegram", through="cli")
    denied = await stack.client.answer(answer_request(stack.owner, "invite", "authorization", "deny", decider=by))
    assert not denied.repeated and denied.follow_up is None
    row = await stack.store.get(stack.owner, "invite")
    assert row is not None and row.state is RowState.DELIVERED and row.followed_up_by is None
    # The deny of a delivered outcome changes no row, and still leaves its record (R56).
    [record] = await stack.store.reads.wait_records(stack.owner, helper_id="invite")
    assert (record.ended, record.granted, record.decider) == (WaitEndKind.DENIED, None, by)
    assert record.delivered_at == row.delivered_at
    granted = await stack.client.answer(answer_request(stack.owner, "invite", "authorization", option_id="grant"))
    assert granted.repeated and not granted.same and granted.option_id == "deny"
    assert await stack.store.get(stack.owner, "invite.answer") is None
    assert core_sessions(tmp_path / "core.sqlite3", "invite.answer") == []


async def test_answers_the_question_did_not_ask_for_are_refused_and_write_nothing(stack: Stack) -> None:
    await _ask(stack, "date", end="question", question="When?", options=OPTIONS, question_id="venue")
    for code, question_id, option_id in (("stale_question", "day", "walk"), ("not_offered", "venue", "bike")):
        with pytest.raises(HelperRefused) as refusal:
            await stack.client.answer(answer_request(stack.owner, "date", question_id, option_id=option_id))
        assert refusal.value.code == code, refusal.value
    with pytest.raises(HelperRefused) as no_text:
        await stack.client.answer(answer_request(stack.owner, "date", "venue", text="somewhere quiet"))
    assert no_text.value.code == "not_offered" and "walk, taxi" in no_text.value.message
    with pytest.raises(HelperRefused) as unknown:
        await stack.client.answer(answer_request(stack.owner, "nobody", "venue", option_id="walk"))
    assert unknown.value.code == "unknown_helper"
    with pytest.raises(HelperRefused) as foreign:  # another owner's helper is not in this owner's book
        # An owner of this test's own: a fixed one's coordinator, started by another test on this dev server, would
        # wait on that test's task queue, which no worker polls any more.
        await stack.client.answer(answer_request(f"{stack.owner}-other", "date", "venue", option_id="walk"))
    assert foreign.value.code == "unknown_helper"
    with pytest.raises(InvalidRequest):  # refused before anything is sent
        await stack.client.answer(answer_request(stack.owner, "date", "venue", text=""))
    # Nothing was written: the question still takes its answer.
    row = await stack.store.get(stack.owner, "date")
    assert row is not None and row.state is RowState.UNREPORTED and row.followed_up_by is None
    taken = await stack.client.answer(answer_request(stack.owner, "date", "venue", option_id="taxi"))
    assert not taken.repeated and taken.follow_up is not None


async def test_an_answer_sent_before_the_question_is_not_answerable_whatever_the_timing(stack: Stack) -> None:
    """R49, R53: the owner guesses the answer while the helper still works and asks exactly that question a moment later
    (within the coordinator's wait for its finished notice): nobody could have seen it, so it is `not_answerable`,
    nothing starts, and the question, once asked, takes its answer."""
    task = scripted_task(
        "Plan the offsite.", steps=4, step_ms=300, end="question", question="Which?", options=OPTIONS, question_id="day"
    )
    await stack.client.start(helper_request(stack.owner, "early", task))
    row = await stack.store.get(stack.owner, "early")
    assert row is not None and row.outcome_kind is None
    with pytest.raises(HelperRefused) as refusal:
        await stack.client.answer(answer_request(stack.owner, "early", "day", option_id="walk"))
    assert refusal.value.code == "not_answerable", refusal.value
    asked = await finished_row(stack, "early")
    assert asked.outcome_kind is OutcomeKind.QUESTION and asked.followed_up_by is None
    assert await stack.store.get(stack.owner, "early.answer") is None
    taken = await stack.client.answer(answer_request(stack.owner, "early", "day", option_id="walk"))
    assert not taken.repeated and taken.follow_up is not None


async def test_an_answer_refused_for_want_of_an_open_place_is_not_recorded(stack: Stack) -> None:
    """R2, R49: with every open place taken, the answer is refused, nothing is recorded, and it can be given again."""
    await _ask(stack, "room", end="question", question="Big or small?")  # a plain-text question: free text
    holding = scripted_task("Hold on.", steps=1, step_ms=50, hold_until="open-places")
    for helper_id in ("busy-1", "busy-2", "busy-3"):
        await stack.client.start(helper_request(stack.owner, helper_id, holding))
    with pytest.raises(HelperRefused) as refusal:
        await stack.client.answer(answer_request(stack.owner, "room", "question", text="Small, please."))
    assert refusal.value.code == "too_many_open"
    await stack.client.close(stack.owner, "busy-1")
    taken = await stack.client.answer(answer_request(stack.owner, "room", "question", text="Small, please."))
    assert not taken.repeated and taken.text == "Small, please."
    assert taken.follow_up is not None and taken.follow_up.helper_id == "room.answer"


async def test_the_console_script_and_the_service_answer_as_the_client_does(stack: Stack) -> None:
    """R42, R47, R49: `helper-starter answer` and `POST .../answer`: the first answer is exit 0 / 200 with its
    follow-up, a later different one the first again (`repeated`), a stale question exit 1 / 409."""
    await _ask(stack, "pick", end="question", question="Where?", options=OPTIONS, question_id="venue")
    settings = stack.settings.model_copy(
        update={"temporal_address": stack.env.client.service_client.config.target_host}
    )
    answer = ["answer", "--owner", stack.owner, "--id", "pick", "--question", "venue"]
    code, first = await _cli(settings, [*answer, "--option", "taxi"])
    assert code == 0 and first["repeated"] is False and first["follow_up"]["helper_id"] == "pick.answer", first
    code, stale = await _cli(
        settings, ["answer", "--owner", stack.owner, "--id", "pick", "--question", "x", "--text", "a"]
    )
    assert (code, stale["error"]["code"]) == (1, "stale_question"), stale
    async with serving_api(stack) as url, httpx.AsyncClient(timeout=30) as http:
        path = f"{url}/v1/owners/{stack.owner}/helpers/pick/answer"
        again = await http.post(path, json={"question_id": "venue", "option_id": "walk"})
        assert again.status_code == 200, again.text
        assert again.json()["repeated"] is True and again.json()["same"] is False
        assert again.json()["option_id"] == "taxi"
        refused = await http.post(path, json={"question_id": "venue", "option_id": "bike"})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "not_offered"
        unknown = await http.post(
            f"{url}/v1/owners/{stack.owner}/helpers/nobody/answer", json={"question_id": "v", "text": "a"}
        )
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_helper"


async def test_the_first_answer_stays_the_one_after_the_coordinator_continues_as_new(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R45, R49: the answer is recorded in the book the coordinator carries when it continues as new: answers that
    reach a later run get the first back and start nothing."""
    monkeypatch.setattr(coordinator, "MAX_MESSAGES_PER_RUN", 3)  # the worker runs in this process
    await _ask(stack, "trip", end="question", question="Where?", options=OPTIONS, question_id="venue")
    first = await stack.client.answer(answer_request(stack.owner, "trip", "venue", option_id="walk"))
    assert not first.repeated
    for _ in range(4):
        again = await stack.client.answer(answer_request(stack.owner, "trip", "venue", option_id="taxi"))
        assert again.repeated and not again.same and again.option_id == "walk"
    runs = [run async for run in stack.env.client.list_workflows(f'WorkflowId = "{coordinator_id(stack.owner)}"')]
    assert len(runs) >= 2, f"expected the coordinator to continue as new, got {len(runs)} runs"
    assert len(core_sessions(tmp_path / "core.sqlite3", "trip.answer")) == 1
