"""The helper-script block: the builder, parsing, validation and the scripted prompt sizes."""

from __future__ import annotations

from typing import Any

import pytest

from reference.core.script import (
    Script,
    ScriptEnd,
    ScriptError,
    parse_script,
    scripted_task,
    task_title,
    with_follow_up_script,
)


def test_scripted_task_round_trips_through_the_parser() -> None:
    """The builder writes exactly the fields given; the parser reads them back with defaults for the rest."""
    calls = [{"step": 1, "tool": "read_mail"}]
    task = scripted_task("Plan the offsite\nDetails follow.", steps=4, end="question", tool_calls=calls)

    script = parse_script(task)

    assert task.startswith("Plan the offsite\nDetails follow.\n\n```helper-script\n")
    assert script.steps == 4 and script.end is ScriptEnd.QUESTION
    assert [(call.step, call.tool) for call in script.tool_calls] == [(1, "read_mail")]
    assert script.step_ms == Script().step_ms == 300
    assert task_title(task) == "Plan the offsite"


def test_a_task_without_a_block_gets_the_defaults() -> None:
    assert parse_script("Just do it") == Script()
    assert Script().steps == 3 and Script().end is ScriptEnd.COMPLETE


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"steps": -1}, "script.steps"),
        ({"steps": 0}, "script.steps"),
        ({"cached_ratio": 1.5}, "script.cached_ratio"),
        ({"end": "explode"}, "script.end"),
        ({"colour": "blue"}, "script.colour"),
        ({"compact_at": [1]}, "script.compact_at"),
        ({"tool_calls": [{"step": 1, "tool": "format_disk"}]}, "script.tool_calls.0"),
        (
            {"tool_calls": [{"step": 1, "tool": "send_mail", "args": {"subject": "no recipient"}}]},
            "script.tool_calls.0",
        ),
        ({"steps": 2, "tool_calls": [{"step": 2, "tool": "read_mail"}]}, "script.tool_calls"),
        ({"cancel_delay_ms": -5}, "script.cancel_delay_ms"),
        ({"end": "complete", "options": [["a", "A"]]}, "script"),
        ({"end": "question", "options": [["a", "A"], ["a", "B"]]}, "script"),
        ({"end": "question", "options": [[f"o{n}", "O"] for n in range(11)]}, "script.options"),
        ({"end": "question", "options": [["a", "x" * 201]]}, "script.options.0.label"),
        ({"end": "question", "question_id": "q-1"}, "script"),
        ({"end": "question", "options": [["a"]]}, "script.options.0"),
    ],
)
def test_a_bad_script_names_the_field(fields: dict[str, Any], field: str) -> None:
    """R5 (core side): a bad script is refused early, naming the offending field."""
    with pytest.raises(ScriptError) as refused:
        scripted_task("task", **fields)
    assert refused.value.field == field
    assert str(refused.value).startswith(field)


def test_a_structured_question_takes_its_options_as_id_label_pairs() -> None:
    """R49: options are given as [id, label] pairs (or objects), with the free-text rule and the question's id;
    the scripted model passes them to ask_owner as they are."""
    task = scripted_task(
        "Pick a venue", steps=1, end="question", options=[("walk", "Walking distance"), ("taxi", "A taxi")]
    )
    script = parse_script(task)
    assert [(o.id, o.label) for o in script.options] == [("walk", "Walking distance"), ("taxi", "A taxi")]
    assert script.ask_owner_arguments("Walk or taxi?") == {
        "question": "Walk or taxi?",
        "options": [{"id": "walk", "label": "Walking distance"}, {"id": "taxi", "label": "A taxi"}],
        "free_text": False,
    }
    words = parse_script(scripted_task("t", end="question", question="Why?", free_text=True, question_id="why-1"))
    assert words.ask_owner_arguments("unused") == {
        "question": "Why?",
        "options": [],
        "free_text": True,
        "question_id": "why-1",
    }
    assert parse_script(scripted_task("t", end="question")).ask_owner_arguments("Which?") == {"question": "Which?"}


def test_tool_calls_at_the_end_step_are_allowed_where_the_end_is_a_tool_call() -> None:
    """A question or authorization end is itself a tool call, so other tools may share its step."""
    calls = [{"step": 2, "tool": "draft_mail", "args": {"to": "a@example.com", "subject": "Hi"}}]
    assert parse_script(scripted_task("t", steps=2, end="question", tool_calls=calls)).steps == 2
    assert parse_script(scripted_task("t", steps=2, end="run", tool_calls=[{"step": 50, "tool": "read_mail"}]))


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("t\n```helper-script\n[1, 2]\n```", "JSON object"),
        ('t\n```helper-script\n{"steps": 2,}\n```', "not valid JSON"),
        ("t\n```helper-script\n{}\n```\n```helper-script\n{}\n```", "at most one"),
    ],
)
def test_a_malformed_block_is_refused(task: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        parse_script(task)


def test_prompts_grow_per_call_and_fall_at_compaction() -> None:
    """R12, R14: the scripted prompt grows by input_growth and falls to the compaction target."""
    default_target = Script(input_tokens=1000, input_growth=1000, compact_at=[4])
    explicit_target = Script(input_tokens=1000, input_growth=1000, compact_at=[3], compact_to_tokens=100)

    assert [default_target.prompt_tokens(i) for i in range(1, 6)] == [
        (1000, False),
        (2000, False),
        (3000, False),
        (900, True),
        (1900, False),
    ]
    assert [explicit_target.prompt_tokens(i)[0] for i in range(1, 5)] == [1000, 2000, 100, 1100]


def test_the_title_is_the_first_line_outside_the_block() -> None:
    task = "```helper-script\n{}\n```\n\n  " + "x" * 200 + "\nsecond line"
    assert task_title(task) == "x" * 79 + "…"


def test_a_follow_up_without_a_script_of_its_own_runs_the_one_its_earlier_task_names() -> None:
    """The runtime writes a follow-up's task; the earlier task's `follow_up` scripts what that follow-up does."""
    earlier = scripted_task("Ask first.", end="question", question="Which?", follow_up={"steps": 2, "end": "run"})
    scripted = with_follow_up_script("The owner answered.", earlier)
    assert parse_script(scripted).end is ScriptEnd.RUN and parse_script(scripted).steps == 2
    own = scripted_task("Its own.", steps=5)
    assert with_follow_up_script(own, earlier) == own
    assert with_follow_up_script("No script anywhere.", "Plain earlier task") == "No script anywhere."
