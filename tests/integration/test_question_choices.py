"""A helper's structured question (R49): its choices reach the row, outcome.json and the outcome text.

The finalizer on a real store and result directory; then the whole path on the time-skipping server with the real
worker and a fake core that asks over HTTP, the choices distrusted on the way in (R37).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.rows import RowActivities
from contracts.core_api import QuestionChoices, QuestionOption, SessionStatus
from domain.messages.activities import Finalize, RowKey
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from store.helper_store import HelperStore
from store.results import OUTCOME_JSON, OUTCOME_TEXT, ResultDirectories
from tests.fakes.fake_core import FakeCore, FakeSession
from tests.helpers import admitted_row, eventually, helper_request
from tests.integration.stack import time_stack

CHOICES = QuestionChoices(
    question_id="venue",
    options=[QuestionOption(id="hall-a", label="Зал «А»"), QuestionOption(id="roof", label="Крыша")],
    free_text=True,
)


async def test_the_finalizer_writes_a_questions_choices_to_the_row_and_both_files(tmp_path: Path) -> None:
    """R18, R49: the row, outcome.json and the outcome text (in the owner's language) carry the choices."""
    store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
    results = ResultDirectories(tmp_path / "results")
    rows = RowActivities(store, results)
    now = datetime.now(UTC)
    directory = results.path_for("vic", "h1", 1)
    await store.insert_admitted(
        admitted_row(
            "vic",
            "h1",
            at=now,
            result_dir=directory,
            state=RowState.RUNNING,
            task="Pick a venue",
            language="ru",
            generation=2,
        )
    )
    final = Finalize(
        row=RowKey(owner="vic", helper_id="h1", seq=1, generation=3),
        kind=OutcomeKind.QUESTION,
        state=RowState.UNREPORTED,
        language="ru",
        model="scripted",
        question="Где провести встречу?",
        choices=CHOICES,
        summary_max=1_500,
        finished_at=now,
    )
    try:
        written = await ActivityEnvironment().run(rows.finalize_outcome, final)
        row = await store.get("vic", "h1")
    finally:
        await store.close()
    text = await asyncio.to_thread((directory / OUTCOME_TEXT).read_text, encoding="utf-8")
    record = json.loads(await asyncio.to_thread((directory / OUTCOME_JSON).read_text, encoding="utf-8"))
    assert written.applied and row is not None and row.choices == CHOICES
    assert record["choices"] == CHOICES.model_dump(mode="json")
    options = "Варианты ответа:\n- Зал «А»\n- Крыша\nИли ответьте своими словами."
    assert text == f"Помощнику нужен ответ: Где провести встречу?\n\n{options}"
    assert row.summary == text  # short enough to be the summary whole: the chat reads the options too


@dataclass
class AskingSession(FakeSession):
    """A session that asks the owner a structured question at once, its choices sent as the core sends them."""

    sent_choices: dict[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        return {**super().body(), "choices": self.sent_choices}


class AsksAtOnce(dict[str, FakeSession]):
    """A session table whose sessions ask `question` with `choices` (a JSON object, sent unchecked) at their
    first snapshot."""

    def __init__(self, question: str, choices: dict[str, Any]) -> None:
        super().__init__()
        self.question = question
        self.choices = choices

    def __setitem__(self, session_id: str, session: FakeSession) -> None:
        asking = AskingSession(session_id=session.session_id, request=session.request, sent_choices=self.choices)
        asking.add_step(input_tokens=900, output_tokens=120, message="Two venues are free on Friday.")
        asking.status = SessionStatus.QUESTION
        asking.question = self.question
        super().__setitem__(session_id, asking)


async def test_a_core_that_asks_with_choices_ends_the_helper_with_a_question_whose_row_offers_them(
    time_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """R16, R49: the real worker follows a core that asks a structured question: the helper ends with a question
    outcome whose row, listing and outcome.json carry the choices as sent, control characters stripped (R37)."""
    sent = {
        "question_id": "venue",
        "options": [{"id": "hall-a", "label": "Hall A\x00"}, {"id": "roof", "label": "The roof"}],
        "free_text": False,
    }
    expected = QuestionChoices(
        question_id="venue",
        options=[QuestionOption(id="hall-a", label="Hall A"), QuestionOption(id="roof", label="The roof")],
    )
    core = FakeCore(sessions=AsksAtOnce("Which venue?", sent))
    async with time_stack(time_env, tmp_path, core) as stack:
        await stack.client.start(helper_request("ida", "venue"))

        async def final() -> HelperRow | None:
            row = await stack.store.get("ida", "venue")
            return row if row is not None and row.outcome_kind is not None else None

        row = await eventually(final, timeout=30)
        listed = await stack.store.reads.views("ida", [RowState.UNREPORTED])
    assert row.outcome_kind is OutcomeKind.QUESTION and row.choices == expected
    assert [view.choices for view in listed] == [expected]
    record = json.loads((Path(row.result_dir) / OUTCOME_JSON).read_text(encoding="utf-8"))
    assert record["question"] == "Which venue?" and record["choices"] == expected.model_dump(mode="json")
    assert "Options to choose from:\n- Hall A\n- The roof" in (row.summary or "")
