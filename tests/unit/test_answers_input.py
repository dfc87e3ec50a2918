"""`answers`' input (R56): each answer checked as `answer` checks it, all before any is sent; one that breaks a limit
makes the whole call an invalid request naming it, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest

from domain.limits import ANSWERS_MAX
from protocol.errors import InvalidRequest
from starter.inputs import answer_request, answer_requests


def one(helper_id: str = "pick-room", **fields: Any) -> dict[str, Any]:
    return {"helper_id": helper_id, "question_id": "room", "option_id": "hall", **fields}


def test_each_answer_is_the_request_answer_would_send_with_who_answered_and_through_what() -> None:
    requests = answer_requests("anna", {"answers": [one(by="owner", via="telegram"), one("trip")]}, "api")
    assert [r.helper_id for r in requests] == ["pick-room", "trip"]
    first = requests[0]
    assert first == answer_request("anna", "pick-room", "room", "hall", decider=first.decider)
    assert first.decider is not None and (first.decider.by, first.decider.via, first.decider.through) == (
        "owner",
        "telegram",
        "api",
    )


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"answers": []}, "answers: give a list of 1-20"),
        ({"answers": [one(f"h{n}") for n in range(ANSWERS_MAX + 1)]}, "answers: give a list of 1-20"),
        ({"answer": [one()]}, "answers: give a list"),
        ({"answers": [one(), "hall"]}, "answers[1]: an object naming its helper_id"),
        ({"answers": [one(), one(text="x" * 4_001, option_id=None)]}, "answers[1]: text has 4001 characters"),
        ({"answers": [one(option_id=None)]}, "answers[0]: answer with exactly one of option_id and text"),
        ({"answers": [one("../etc")]}, "answers[0]: helper_id"),
        ({"answers": [one(by="b" * 65)]}, "answers[0]: by: use 1-64 characters"),
        ({"answers": [one(owner="bea")]}, "answers[0].owner: not a field of an answer"),
        ({"answers": [one(option_id=7)]}, "answers[0].option_id: a string"),
        ({"answers": [one()], "turn": "t-1"}, "turn: not a field of answers"),
    ],
)
def test_a_call_with_one_bad_answer_is_an_invalid_request_naming_it(body: Any, named: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        answer_requests("anna", body, "cli")
    assert named in refused.value.message, refused.value.message
