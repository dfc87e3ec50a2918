"""Request parsing (R1, R5) and the effective limits of one helper (R1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from contracts.core_api import MODEL_MAX_CHARS, CreateSession, ModelCatalog
from domain.boundary import ACCEPTED_FORMS, BoundaryItem
from domain.limits import (
    HELPER_BOUNDARY_ITEM_MAX_CHARS,
    HELPER_BOUNDARY_MAX_ITEMS,
    HELPER_CEILING_TOKENS,
    HELPER_DEADLINE_MS,
    HELPER_GRACE_MS,
    HELPER_INPUT_CEILING_TOKENS,
    HELPER_TASK_MAX_CHARS,
    TURN_MAX_STEPS_HELPER,
    LimitOverrides,
    Limits,
    effective_limits,
    looser_than,
)
from domain.requests import HelperRequest, RequestError

LIMIT_NAMES = list(Limits.model_fields)


def valid(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "owner": "anna",
        "helper_id": "h-2026.03_01",
        "task": "Find the Q3 report and draft a summary for the board.",
        "boundary": ["send_mail to board@example.com"],
        "language": "ru",
        "model": "gpt-large",
        "goal_id": None,
        "limits": {"deadline_ms": 600_000},
        "session_limits": {"ceiling_tokens": 500_000},
    }
    data.update(changes)
    return data


def problems_of(data: dict[str, Any], defaults: Limits | None = None) -> list[str]:
    with pytest.raises(RequestError) as caught:
        HelperRequest.parse(data, defaults)
    assert caught.value.problems, "a refusal names at least one problem"
    assert str(caught.value) == "; ".join(caught.value.problems)
    return caught.value.problems


def names(problems: list[str], field: str) -> bool:
    return any(problem.startswith(field) for problem in problems)


# --- valid requests (R1) -----------------------------------------------------------------------------


def test_a_valid_request_parses_with_every_field() -> None:
    """R1: owner, helper id, task, boundary, language, model, Goal id and tighter limits."""
    request = HelperRequest.parse(valid(goal_id="weekly-mail"))
    assert request.owner == "anna"
    assert request.helper_id == "h-2026.03_01"
    assert request.boundary == ("send_mail to board@example.com",)
    assert request.authority == (BoundaryItem(tool="send_mail", targets=("board@example.com",)),)
    assert request.language == "ru"
    assert request.model == "gpt-large"
    assert request.goal_id == "weekly-mail"
    assert request.is_goal_check
    assert request.limits == LimitOverrides(deadline_ms=600_000)
    assert request.session_limits == LimitOverrides(ceiling_tokens=500_000)


def test_minimal_request_uses_defaults() -> None:
    """R1: an empty boundary (find, prepare, draft), English, no Goal, no tighter limits."""
    request = HelperRequest.parse({"owner": "o", "helper_id": "h", "task": "t", "model": "m"})
    assert request.boundary == ()
    assert request.language == "en"
    assert request.goal_id is None and not request.is_goal_check
    assert request.limits is None and request.session_limits is None


def test_task_at_the_size_limit_is_accepted() -> None:
    """R5: exactly HELPER_TASK_MAX_CHARS characters is not oversized."""
    assert len(HelperRequest.parse(valid(task="x" * HELPER_TASK_MAX_CHARS)).task) == HELPER_TASK_MAX_CHARS


def test_limits_equal_to_the_defaults_are_not_looser() -> None:
    """R1: a request may repeat the default; only raising it is refused."""
    request = HelperRequest.parse(valid(limits={name: getattr(Limits(), name) for name in LIMIT_NAMES}))
    assert request.limits is not None


def test_boundary_at_its_limits_is_accepted() -> None:
    """R5, R41: the maximum number of boundary items of the maximum length is accepted."""
    prefix, domain = "send_mail to ", "@example.com"
    item = prefix + "b" * (HELPER_BOUNDARY_ITEM_MAX_CHARS - len(prefix) - len(domain)) + domain
    assert len(item) == HELPER_BOUNDARY_ITEM_MAX_CHARS
    boundary = [item] * HELPER_BOUNDARY_MAX_ITEMS
    assert len(HelperRequest.parse(valid(boundary=boundary)).boundary) == HELPER_BOUNDARY_MAX_ITEMS


def test_the_boundary_keeps_its_wire_form_and_derives_the_parsed_one() -> None:
    """R41: the strings Iva sent are kept as sent (the core gets them); the parsed items are derived."""
    boundary = ["Send mail to Bob@example.com, ann@example.com", "create event with bob@example.com"]
    request = HelperRequest.parse(valid(boundary=boundary))
    assert request.boundary == tuple(boundary)
    assert request.authority == (
        BoundaryItem(tool="send_mail", targets=("bob@example.com", "ann@example.com")),
        BoundaryItem(tool="create_event", targets=("bob@example.com",)),
    )


# --- malformed requests (R5): every problem names its field -------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("helper_id", "bad id"),
        ("helper_id", ""),
        ("helper_id", "-leading-dash"),
        ("helper_id", "a/b"),
        ("helper_id", "h" * 65),
        ("helper_id", "помощник"),
        ("owner", "anna smith"),
        ("owner", "../etc"),
        ("owner", ""),
        ("goal_id", "goal id"),
        ("goal_id", "g" * 65),
        ("goal_id", ""),
    ],
)
def test_ids_outside_the_safe_pattern_are_refused(field: str, value: str) -> None:
    """R5: a bad helper id, owner or Goal id is refused, naming the field."""
    problems = problems_of(valid(**{field: value}))
    assert names(problems, field), problems
    assert len(problems) == 1


def test_longest_id_is_accepted() -> None:
    """R5: 64 characters is the longest id."""
    assert HelperRequest.parse(valid(helper_id="h" * 64)).helper_id == "h" * 64


@pytest.mark.parametrize("task", ["", "   ", "\n\t "])
def test_empty_task_is_refused(task: str) -> None:
    """R5: an empty or blank task is refused, naming the task."""
    problems = problems_of(valid(task=task))
    assert names(problems, "task") and "empty" in problems[0]


def test_oversized_task_is_refused() -> None:
    """R5: a task over HELPER_TASK_MAX_CHARS is refused and the problem says how long it was."""
    problems = problems_of(valid(task="x" * (HELPER_TASK_MAX_CHARS + 1)))
    assert names(problems, "task")
    assert str(HELPER_TASK_MAX_CHARS + 1) in problems[0] and str(HELPER_TASK_MAX_CHARS) in problems[0]


@pytest.mark.parametrize("language", ["de", "EN", "", "english"])
def test_unknown_language_is_refused(language: str) -> None:
    """R5, R32: only supported owner languages are accepted."""
    problems = problems_of(valid(language=language))
    assert names(problems, "language") and "en, ru" in problems[0]


@pytest.mark.parametrize("name", LIMIT_NAMES)
def test_limits_looser_than_the_defaults_are_refused(name: str) -> None:
    """R1, R5: a request may only tighten; a looser limit is out of range and named."""
    problems = problems_of(valid(limits={name: getattr(Limits(), name) + 1}))
    assert problems == [f"limits.{name} is above the default {getattr(Limits(), name)}; a request may only tighten"]


def test_looser_limits_are_judged_against_the_coordinators_defaults() -> None:
    """R1: the defaults may be configured lower; a request above them is refused."""
    defaults = Limits(deadline_ms=60_000)
    problems = problems_of(valid(limits={"deadline_ms": 120_000}), defaults)
    assert problems == ["limits.deadline_ms is above the default 60000; a request may only tighten"]
    assert HelperRequest.parse(valid(limits={"deadline_ms": 60_000}), defaults).limits == LimitOverrides(
        deadline_ms=60_000
    )


@pytest.mark.parametrize("section", ["limits", "session_limits"])
@pytest.mark.parametrize("name", LIMIT_NAMES)
@pytest.mark.parametrize("value", [0, -1])
def test_non_positive_limits_are_refused(section: str, name: str, value: int) -> None:
    """R5: limits must be positive, in the request and in the session's limits."""
    problems = problems_of(valid(**{section: {name: value}}))
    assert names(problems, f"{section}.{name}"), problems


def test_unknown_extra_field_is_refused() -> None:
    """R5: a field the contract does not know is refused, not ignored."""
    assert problems_of(valid(colour="blue")) == ["colour is not a known field"]
    assert names(problems_of(valid(limits={"speed": 3})), "limits.speed")


def test_missing_fields_are_named() -> None:
    """R5: every missing required field is named."""
    problems = problems_of({"owner": "anna"})
    assert {"helper_id is missing", "task is missing", "model is missing"} <= set(problems)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("task", "report \udcff for Q3"),
        ("model", "gpt\udcff"),
        ("boundary", ["send mail \ud800"]),
    ],
)
def test_invalid_utf8_is_refused(field: str, value: object) -> None:
    """R5: text that cannot be encoded as UTF-8 (a lone surrogate) is refused, naming the field."""
    problems = problems_of(valid(**{field: value}))
    assert names(problems, field), problems
    assert "UTF-8" in problems[0]


def test_undecodable_bytes_are_refused() -> None:
    """R5: raw bytes that are not UTF-8 are refused, naming the field."""
    assert names(problems_of(valid(task=b"report \xff\xfe")), "task")


def test_too_many_boundary_items_are_refused() -> None:
    """R5, R41: at most HELPER_BOUNDARY_MAX_ITEMS actions can be named."""
    problems = problems_of(valid(boundary=["send_mail to bob@example.com"] * (HELPER_BOUNDARY_MAX_ITEMS + 1)))
    assert names(problems, "boundary") and str(HELPER_BOUNDARY_MAX_ITEMS) in problems[0]


@pytest.mark.parametrize("item", ["", "  ", "b" * (HELPER_BOUNDARY_ITEM_MAX_CHARS + 1)])
def test_bad_boundary_items_are_refused(item: str) -> None:
    """R5: each boundary item is 1..HELPER_BOUNDARY_ITEM_MAX_CHARS non-blank characters."""
    assert names(problems_of(valid(boundary=["send_mail to bob@example.com", item])), "boundary")


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("send_mail", "names send_mail but not whom it may touch"),
        ("send mail to bob", "'bob' is not an e-mail address"),
        ("send the summary to board@example.com", "not of an accepted form"),
        ("pay_invoice to bob@example.com", "a boundary names only send_mail and create_event"),
        ("send_mail: NO, never", "a negation or condition never authorizes anything"),
        ("never send mail", "a negation or condition never authorizes anything"),
        ("send mail only after I confirm", "a negation or condition never authorizes anything"),
        ("don't send mail to bob@example.com", "a negation or condition never authorizes anything"),
        ("send_mail to bob@example.com\nsend_mail to evil@example.com", "U+000A"),
        ("send_mail to bob@example.com\x00", "U+0000"),
    ],
)
def test_a_boundary_item_that_does_not_parse_is_refused_with_the_accepted_forms(item: str, says: str) -> None:
    """R41, R5: an item that is not '<tool> to|with <address>[, ...]' is refused at admission (exit 2 in the
    starter), naming the boundary, why, and the accepted forms; negations and line breaks never pass."""
    problems = problems_of(valid(boundary=["send_mail to bob@example.com", item]))
    assert len(problems) == 1 and problems[0].startswith("boundary: "), problems
    assert says in problems[0], problems
    assert ACCEPTED_FORMS in problems[0] or "use one line" in problems[0], problems
    assert "\n" not in problems[0] and "\x00" not in problems[0]


@pytest.mark.parametrize(
    ("field", "value", "character"),
    [
        ("task", "Find the report\x00 and mail it", "U+0000"),
        ("task", "Find the report\x1b[2J", "U+001B"),
        ("task", "Find the report\x7f", "U+007F"),
        ("task", "Find the report\x0b", "U+000B"),
        ("task", "Find\x85the report", "U+0085"),
        ("model", "gpt-5\x00", "U+0000"),
        ("model", "gpt-5\n", "U+000A"),
        ("model", "gpt\t5", "U+0009"),
    ],
)
def test_control_characters_are_refused_naming_the_field(field: str, value: str, character: str) -> None:
    """R5, R40: NUL and the other control characters are refused in every text field, naming the field and the
    character (a NUL would make a PostgreSQL write fail), so nothing is written."""
    problems = problems_of(valid(**{field: value}))
    assert len(problems) == 1 and names(problems, field), problems
    assert character in problems[0] and "control character" in problems[0]


def test_a_stored_request_still_loads_but_is_not_admitted_again() -> None:
    """R41, R5: the grammar and the control-character checks are admission checks. A request read back from a
    history recorded before them (bare `send_mail`, a NUL) still loads, so the history replays; admitting it
    again (`parse`, the starter, the coordinator's update validator via `check_against`) refuses it."""
    stored = valid(boundary=["send_mail"], task="Mail Bob\x00", limits=None)
    request = HelperRequest.model_validate(stored)  # what Temporal's converter does on replay
    assert request.boundary == ("send_mail",)
    with pytest.raises(RequestError) as refused:
        request.check_against(Limits())
    assert names(refused.value.problems, "task") and names(refused.value.problems, "boundary")
    assert len(problems_of(stored)) == 2


def test_line_breaks_and_tabs_are_kept_in_the_task() -> None:
    """R5: the task is prose: line breaks (LF or CRLF) and tabs are allowed there, and only there."""
    task = "Find the Q3 report.\n\tThen draft a summary.\r\nKeep it short."
    assert HelperRequest.parse(valid(task=task)).task == task


@pytest.mark.parametrize("model", ["", "  ", "m" * 101])
def test_bad_model_is_refused(model: str) -> None:
    """R1, R5: the model name is 1-100 characters."""
    assert names(problems_of(valid(model=model)), "model")


def test_a_model_the_request_takes_is_one_the_core_contract_takes() -> None:
    """R1, R5, R37: one bound on the model's name: the longest a request takes is the longest a core's catalog
    lists and a session selects, and one more is refused by all three."""
    longest, longer = "m" * MODEL_MAX_CHARS, "m" * (MODEL_MAX_CHARS + 1)
    assert HelperRequest.parse(valid(model=longest)).model == longest
    assert ModelCatalog(models=[longest]).models == [longest]
    assert CreateSession.model_validate(session_of(longest)).model == longest
    assert names(problems_of(valid(model=longer)), "model")
    with pytest.raises(ValidationError):
        ModelCatalog(models=[longer])
    with pytest.raises(ValidationError):
        CreateSession.model_validate(session_of(longer))


def session_of(model: str) -> dict[str, Any]:
    return {
        "idempotency_key": "k",
        "owner": "anna",
        "helper_id": "h1",
        "task": "t",
        "language": "en",
        "model": model,
        "limits": {"max_steps": 80, "max_input_tokens": 4_000_000},
    }


def test_every_problem_is_named_at_once() -> None:
    """R5: a request with several problems names each of them."""
    problems = problems_of(valid(owner="bad owner", task="", language="xx", extra=1))
    for field in ("owner", "task", "language", "extra"):
        assert names(problems, field), (field, problems)


def test_request_is_frozen() -> None:
    """R5: a parsed request cannot be changed after it was checked."""
    request = HelperRequest.parse(valid())
    with pytest.raises(ValueError, match="frozen"):
        request.task = "something else"  # type: ignore[misc]


# --- effective limits (R1) ----------------------------------------------------------------------------


def test_effective_limits_without_overrides_are_the_defaults() -> None:
    """R1: nothing tighter named: the defaults apply."""
    assert effective_limits(Limits()) == Limits()
    assert effective_limits(Limits(), None, None) == Limits()
    assert Limits() == Limits(
        deadline_ms=HELPER_DEADLINE_MS,
        grace_ms=HELPER_GRACE_MS,
        ceiling_tokens=HELPER_CEILING_TOKENS,
        max_steps=TURN_MAX_STEPS_HELPER,
        max_input_tokens=HELPER_INPUT_CEILING_TOKENS,
    )
    assert Limits().hard_ceiling_ms == 2_820_000  # 47 minutes
    deadline_at = datetime(2026, 3, 1, 9, 45, tzinfo=UTC)
    started_at = deadline_at - timedelta(milliseconds=HELPER_DEADLINE_MS)
    assert Limits().hard_ceiling_at(deadline_at) == deadline_at + timedelta(minutes=2)
    assert Limits().hard_ceiling_at(deadline_at) == started_at + timedelta(milliseconds=Limits().hard_ceiling_ms)


def test_effective_limits_take_the_minimum_field_by_field() -> None:
    """R1: the minimum of the defaults, the session's limits and the request's, per field."""
    session = LimitOverrides(deadline_ms=1_200_000, ceiling_tokens=800_000)
    request = LimitOverrides(deadline_ms=1_800_000, max_steps=40)
    limits = effective_limits(Limits(), session, request)
    assert limits == Limits(deadline_ms=1_200_000, ceiling_tokens=800_000, max_steps=40)
    assert limits.hard_ceiling_ms == 1_200_000 + HELPER_GRACE_MS


overrides = st.builds(
    LimitOverrides, **{name: st.none() | st.integers(min_value=1, max_value=10_000_000) for name in LIMIT_NAMES}
)


@given(session=st.none() | overrides, request=st.none() | overrides)
def test_effective_limits_property(session: LimitOverrides | None, request: LimitOverrides | None) -> None:
    """R1: each effective field is the minimum of the default and every value set for it."""
    limits = effective_limits(Limits(), session, request)
    for name in LIMIT_NAMES:
        candidates = [getattr(Limits(), name)]
        candidates += [getattr(o, name) for o in (session, request) if o is not None and getattr(o, name) is not None]
        assert getattr(limits, name) == min(candidates)


@given(request=overrides)
def test_looser_than_names_exactly_the_raised_fields(request: LimitOverrides) -> None:
    """R1: the fields named as looser are exactly those above the default."""
    raised = {name for name in LIMIT_NAMES if (getattr(request, name) or 0) > getattr(Limits(), name)}
    assert set(looser_than(Limits(), request)) == raised
