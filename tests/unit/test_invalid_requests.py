"""R48, R42, R47, R5: every refusal is classified. A request that breaks a limit is invalid wherever it enters: the
console script exits 2 and the service answers 422 (400 for a body that is not JSON), with `invalid_request` and a
message naming the field and the limit, and nothing is asked of Temporal. It is never `unavailable` (exit 3, 503),
and never the catch-all's "failed unexpectedly": only a transport failure or a timeout is unavailable.

Every starter command meets every limit it has, through `helper-starter` (its `main`; a few as the console script
itself) and through the service, with a Temporal that is connected but fails each call as a server past its
deadline does: an invalid request that got past the checks would reach it, or fail while its message is built,
and show as unavailable. Generated inputs (hypothesis) hold the checks to the wire messages themselves
(`domain.messages.updates`, `domain.requests`, `domain.goals`, `domain.ids`): whatever a message refuses, the starter
has refused first, as invalid, through the service too.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from config.settings import Settings
from domain.book import answering
from domain.goals import Goal
from domain.ids import check_id
from domain.limits import READ_MAX_HELPERS, TURN_MAX_CHARS
from domain.messages.updates import AnswerRequest, Decider, DeliveredRequest, OwnerAnswer, ReadRequest
from domain.requests import HelperRequest
from protocol.errors import InvalidRequest, StarterError
from starter import commands
from starter.service.app import create_app, with_guards
from starter.service.connections import Connections
from tests.helpers import service_client

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "127.0.0.1:9"  # nothing listens
UNEXPECTED = "failed unexpectedly"
OWNER = "anna"
API = f"/v1/owners/{OWNER}"
TOO_MANY_IDS = [f"h{number}" for number in range(READ_MAX_HELPERS + 1)]
NOT_UTF8 = os.fsdecode(b"caf\xe9")  # how a non-UTF-8 argument reaches Python: a lone surrogate
JSON = {"content-type": "application/json"}


class GoneTemporal:
    """A connected Temporal client whose every call fails as a server past its deadline does: a request that
    reaches it is unavailable. `calls` names what was asked of it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise RPCError(f"{name}: no answer in time", RPCStatusCode.DEADLINE_EXCEEDED, b"")

        return call


@dataclass(frozen=True)
class Case:
    """One input that breaks a limit: as `helper-starter` arguments (`argv`) and as a service request (`method`,
    `path`, `body`: JSON, or bytes sent as they are), where that input can be said; `says`: what the message
    names (the field and the limit)."""

    name: str
    argv: list[str] | None
    method: str = ""
    path: str = ""
    body: Any = None
    status: int = 422
    says: tuple[str, ...] = ()


def _start(
    *extra: str, owner: str = OWNER, helper_id: str = "h1", model: str = "scripted", task: str = "Find the Q3 report"
) -> list[str]:
    return ["start", "--owner", owner, "--id", helper_id, "--model", model, "--task", task, *extra]


def _start_body(**changes: Any) -> dict[str, Any]:
    return {"helper_id": "h1", "model": "scripted", "task": "Find the Q3 report", **changes}


def _goal_add(
    *extra: str,
    owner: str = OWNER,
    goal: str = "inbox",
    every: str = "1h",
    model: str = "scripted",
    task: str = "Check",
) -> list[str]:
    return ["goal", "add", "--owner", owner, "--goal", goal, "--every", every, "--model", model, "--task", task, *extra]


def _goal_body(**changes: Any) -> dict[str, Any]:
    return {"goal_id": "inbox", "every": "1h", "model": "scripted", "task": "Check", **changes}


def _read(*helper_ids: str, turn: str = "t-1", owner: str = OWNER) -> list[str]:
    return ["read", "--owner", owner, "--turn", turn, *helper_ids]


def _answer(*extra: str, owner: str = OWNER, helper_id: str = "h1", question: str = "venue") -> list[str]:
    return ["answer", "--owner", owner, "--id", helper_id, "--question", question, *extra]


def _delivered(answer_chars: str = "380", turn: str = "t-1", owner: str = OWNER) -> list[str]:
    return ["delivered", "--owner", owner, "--turn", turn, "--answer-chars", answer_chars]


BOUNDARY_21 = [f"send_mail to b{n}@example.org" for n in range(21)]
BOUNDARY_21_ARGS = [arg for item in BOUNDARY_21 for arg in ("--boundary", item)]
GOAL_ACTIONS = [("pause", "POST", "/pause"), ("resume", "POST", "/resume"), ("run", "POST", "/run")]
GOAL_ACTIONS += [("remove", "DELETE", "")]
HELPERS, GOALS, READ, DELIVERED = f"{API}/helpers", f"{API}/goals", f"{API}/read", f"{API}/delivered"

CASES = [
    # start: ids, the task, the model, the boundary, the language, the limits, the body itself
    Case(
        "start bad helper id",
        _start(helper_id="../etc"),
        "POST",
        HELPERS,
        _start_body(helper_id="../etc"),
        says=("helper id", "1-64"),
    ),
    Case(
        "start 65-char helper id",
        _start(helper_id="h" * 65),
        "POST",
        HELPERS,
        _start_body(helper_id="h" * 65),
        says=("helper id", "1-64"),
    ),
    Case("start bad owner", _start(owner="a b"), "POST", "/v1/owners/a%20b/helpers", _start_body(), says=("owner",)),
    Case("start empty task", _start(task="   "), "POST", HELPERS, _start_body(task="   "), says=("task",)),
    Case(
        "start oversized task",
        _start(task="x" * 20_001),
        "POST",
        HELPERS,
        _start_body(task="x" * 20_001),
        says=("task", "20000"),
    ),
    Case(
        "start task with a control character",
        _start(task="find\x07it"),
        "POST",
        HELPERS,
        _start_body(task="find\x07it"),
        says=("task",),
    ),
    Case(
        "start non-UTF-8 task",
        _start(task=NOT_UTF8),
        "POST",
        HELPERS,
        _start_body(task=NOT_UTF8),
        says=("task", "UTF-8"),
    ),
    Case(
        "start oversized model",
        _start(model="m" * 101),
        "POST",
        HELPERS,
        _start_body(model="m" * 101),
        says=("model", "100"),
    ),
    Case("start empty model", _start(model=" "), "POST", HELPERS, _start_body(model=" "), says=("model",)),
    Case(
        "start 21 boundary items",
        _start(*BOUNDARY_21_ARGS),
        "POST",
        HELPERS,
        _start_body(boundary=BOUNDARY_21),
        says=("boundary", "20"),
    ),
    Case(
        "start oversized boundary item",
        _start("--boundary", "send_mail to " + "b" * 300),
        "POST",
        HELPERS,
        _start_body(boundary=["send_mail to " + "b" * 300]),
        says=("boundary", "200"),
    ),
    Case(
        "start boundary outside the grammar",
        _start("--boundary", "delete everything"),
        "POST",
        HELPERS,
        _start_body(boundary=["delete everything"]),
        says=("boundary",),
    ),
    Case(
        "start unknown language",
        _start("--language", "de"),
        "POST",
        HELPERS,
        _start_body(language="de"),
        says=("language", "en"),
    ),
    Case(
        "start zero limit",
        _start("--deadline-ms", "0"),
        "POST",
        HELPERS,
        _start_body(limits={"deadline_ms": 0}),
        says=("deadline_ms",),
    ),
    Case(
        "start negative limit",
        _start("--grace-ms", "-5"),
        "POST",
        HELPERS,
        _start_body(limits={"grace_ms": -5}),
        says=("grace_ms",),
    ),
    Case(
        "start looser limit",
        _start("--max-steps", "1000000"),
        "POST",
        HELPERS,
        _start_body(limits={"max_steps": 1_000_000}),
        says=("max_steps", "80"),
    ),
    Case(
        "start limit of 10**30",
        _start("--ceiling-tokens", str(10**30)),
        "POST",
        HELPERS,
        _start_body(limits={"ceiling_tokens": 10**30}),
        says=("ceiling_tokens",),
    ),
    Case(
        "start non-numeric limit",
        _start("--ceiling-tokens", "lots"),
        "POST",
        HELPERS,
        _start_body(limits={"ceiling_tokens": "lots"}),
        says=("ceiling",),
    ),
    Case("start unknown limit", None, "POST", HELPERS, _start_body(limits={"turns": 3}), says=("turns",)),
    Case(
        "start wait past the keep",
        _start("--expire-after-ms", str(10**12)),
        "POST",
        HELPERS,
        _start_body(wait={"expire_after_ms": 10**12}),
        says=("wait.expire_after_ms",),
    ),
    Case(
        "start reminder of 0 ms",
        _start("--remind-after-ms", "60000,0"),
        "POST",
        HELPERS,
        _start_body(wait={"remind_after_ms": [60_000, 0]}),
        says=("wait.remind_after_ms",),
    ),
    Case(
        "start six reminders",
        _start("--remind-after-ms", "1,2,3,4,5,6"),
        "POST",
        HELPERS,
        _start_body(wait={"remind_after_ms": [1, 2, 3, 4, 5, 6]}),
        says=("wait.remind_after_ms",),
    ),
    Case(
        "start non-numeric reminder",
        _start("--remind-after-ms", "soon"),
        "POST",
        HELPERS,
        _start_body(wait={"remind_after_ms": ["soon"]}),
        says=("wait.remind_after_ms",),
    ),
    Case("start bad goal id", _start("--goal", "a b"), "POST", HELPERS, _start_body(goal_id="a b"), says=("goal id",)),
    Case(
        "start bad follow-up",
        _start("--follow-up", "../x"),
        "POST",
        HELPERS,
        _start_body(follow_up="../x"),
        says=("follow",),
    ),
    Case(
        "start follows itself up",
        _start("--follow-up", "h1"),
        "POST",
        HELPERS,
        _start_body(follow_up="h1"),
        says=("follow_up",),
    ),
    Case(
        "start unknown field", _start("--colour", "red"), "POST", HELPERS, _start_body(colour="red"), says=("colour",)
    ),
    Case("start body not JSON", None, "POST", HELPERS, b"{helper_id: h1", 400, says=("body: not JSON (",)),
    Case(
        "start body not UTF-8", None, "POST", HELPERS, b'{"helper_id": "h1", "task": "caf\xe9"}', 400, says=("UTF-8",)
    ),
    Case("start body nested too deep", None, "POST", HELPERS, b"[" * 100_000, 400, says=("JSON",)),
    Case("start body not an object", None, "POST", HELPERS, [1, 2], says=("body",)),
    Case(
        "start number of 5,000 digits",
        None,
        "POST",
        HELPERS,
        b'{"limits": {"max_steps": ' + b"9" * 5_000 + b"}}",
        400,
        says=("JSON",),
    ),
    # list, show, unreported, usage, watch: ids and the state
    Case("list bad owner", ["list", "--owner", "a b"], "GET", "/v1/owners/a%20b/helpers", says=("owner",)),
    Case(
        "list 65-char owner",
        ["list", "--owner", "o" * 65],
        "GET",
        f"/v1/owners/{'o' * 65}/helpers",
        says=("owner", "1-64"),
    ),
    Case(
        "list unknown state",
        ["list", "--owner", OWNER, "--state", "lost"],
        "GET",
        f"{HELPERS}?state=lost",
        says=("state",),
    ),
    Case("show bad id", ["show", "--owner", OWNER, "--id", "a b"], "GET", f"{HELPERS}/a%20b", says=("helper id",)),
    Case(
        "show 65-char id",
        ["show", "--owner", OWNER, "--id", "h" * 65],
        "GET",
        f"{HELPERS}/{'h' * 65}",
        says=("helper id", "1-64"),
    ),
    Case(
        "show non-UTF-8 id",
        ["show", "--owner", OWNER, "--id", NOT_UTF8],
        "GET",
        f"{HELPERS}/caf%E9",
        says=("helper id",),
    ),
    Case(
        "unreported bad owner", ["unreported", "--owner", "/abs"], "GET", "/v1/owners/.abs/unreported", says=("owner",)
    ),
    Case("usage non-UTF-8 owner", ["usage", "--owner", NOT_UTF8], "GET", "/v1/owners/caf%E9/usage", says=("owner",)),
    Case(
        "watch bad owner",
        ["watch", "--owner", "a b", "--once"],
        "GET",
        "/v1/owners/a%20b/watch?once=true",
        says=("owner",),
    ),
    Case(
        "watch bad id",
        ["watch", "--owner", OWNER, "--id", "../etc", "--once"],
        "GET",
        f"{API}/watch?helper_id=..%2Fetc",
        says=("helper id",),
    ),
    Case(
        "watch 65-char id",
        ["watch", "--owner", OWNER, "--id", "h" * 65],
        "GET",
        f"{HELPERS}/{'h' * 65}/watch",
        says=("helper id", "1-64"),
    ),
    Case("watch once, not a boolean", None, "GET", f"{API}/watch?once=maybe", says=("once",)),
    # close
    Case("close bad id", ["close", "--owner", OWNER, "--id=-x"], "POST", f"{HELPERS}/-x/close", says=("helper id",)),
    Case(
        "close 65-char id",
        ["close", "--owner", OWNER, "--id", "h" * 65],
        "POST",
        f"{HELPERS}/{'h' * 65}/close",
        says=("helper id", "1-64"),
    ),
    Case(
        "close bad owner",
        ["close", "--owner", "_x", "--id", "h1"],
        "POST",
        "/v1/owners/_x/helpers/h1/close",
        says=("owner",),
    ),
    # answer: the ids, exactly one of an option and a text, the text's bound
    Case(
        "answer bad helper id",
        _answer("--option", "walk", helper_id="a b"),
        "POST",
        f"{HELPERS}/a%20b/answer",
        {"question_id": "venue", "option_id": "walk"},
        says=("helper id",),
    ),
    Case(
        "answer bad owner",
        _answer("--option", "walk", owner="_x"),
        "POST",
        "/v1/owners/_x/helpers/h1/answer",
        {"question_id": "venue", "option_id": "walk"},
        says=("owner",),
    ),
    Case(
        "answer 65-char question id",
        _answer("--option", "walk", question="q" * 65),
        "POST",
        f"{HELPERS}/h1/answer",
        {"question_id": "q" * 65, "option_id": "walk"},
        says=("question_id", "64"),
    ),
    Case(
        "answer option id with a control character",
        _answer("--option", "wa\x07lk"),
        "POST",
        f"{HELPERS}/h1/answer",
        {"question_id": "venue", "option_id": "wa\x07lk"},
        says=("option_id",),
    ),
    Case(
        "answer neither option nor text",
        None,
        "POST",
        f"{HELPERS}/h1/answer",
        {"question_id": "venue"},
        says=("option_id", "text"),
    ),
    Case(
        "answer both option and text",
        None,
        "POST",
        f"{HELPERS}/h1/answer",
        {"question_id": "venue", "option_id": "walk", "text": "walk"},
        says=("exactly one",),
    ),
    Case(
        "answer empty text",
        _answer("--text", "  "),
        "POST",
        f"{HELPERS}/h1/answer",
        {"question_id": "venue", "text": "  "},
        says=("text", "empty"),
    ),
    Case(
        "answer oversized text",
        _answer("--text", "x" * 4_001),
        "POST",
        f"{HELPERS}/h1/answer",
        {"question_id": "venue", "text": "x" * 4_001},
        says=("text", "4000"),
    ),
    Case(
        "answer non-UTF-8 text",
        _answer("--text", NOT_UTF8),
        "POST",
        f"{HELPERS}/h1/answer",
        {"question_id": "venue", "text": NOT_UTF8},
        says=("text", "UTF-8"),
    ),
    Case(
        "answer text with a control character",
        _answer("--text", "yes\x1bplease"),
        "POST",
        f"{HELPERS}/h1/answer",
        {"question_id": "venue", "text": "yes\x1bplease"},
        says=("text",),
    ),
    Case(
        "answer unknown field",
        None,
        "POST",
        f"{HELPERS}/h1/answer",
        {"question_id": "venue", "option_id": "walk", "choice": "walk"},
        says=("choice",),
    ),
    # read: the number of ids, each id, the turn
    Case(
        "read 101 helper ids",
        _read(*TOO_MANY_IDS),
        "POST",
        READ,
        {"turn": "t-1", "helper_ids": TOO_MANY_IDS},
        says=("helper_ids", str(READ_MAX_HELPERS)),
    ),
    Case(
        "read 10,000 helper ids",
        None,
        "POST",
        READ,
        {"turn": "t-1", "helper_ids": [f"h{n}" for n in range(10_000)]},
        says=("helper_ids", str(READ_MAX_HELPERS)),
    ),
    Case("read no helper id", _read(), "POST", READ, {"turn": "t-1", "helper_ids": []}, says=("helper_id",)),
    Case(
        "read a bad helper id",
        _read("h1", "bad id"),
        "POST",
        READ,
        {"turn": "t-1", "helper_ids": ["h1", "bad id"]},
        says=("helper id",),
    ),
    Case(
        "read 65-char helper id",
        _read("h" * 65),
        "POST",
        READ,
        {"turn": "t-1", "helper_ids": ["h" * 65]},
        says=("helper id", "1-64"),
    ),
    Case(
        "read helper ids not strings", None, "POST", READ, {"turn": "t-1", "helper_ids": [1, 2]}, says=("helper_ids",)
    ),
    Case(
        "read empty turn", _read("h1", turn=""), "POST", READ, {"turn": "", "helper_ids": ["h1"]}, says=("turn", "200")
    ),
    Case(
        "read blank turn",
        _read("h1", turn="   "),
        "POST",
        READ,
        {"turn": "   ", "helper_ids": ["h1"]},
        says=("turn", "200"),
    ),
    Case(
        "read 201-char turn",
        _read("h1", turn="t" * 201),
        "POST",
        READ,
        {"turn": "t" * 201, "helper_ids": ["h1"]},
        says=("turn", "200"),
    ),
    Case(
        "read turn with a control character",
        _read("h1", turn="t\x07"),
        "POST",
        READ,
        {"turn": "t\x07", "helper_ids": ["h1"]},
        says=("turn",),
    ),
    Case(
        "read non-UTF-8 turn",
        _read("h1", turn=NOT_UTF8),
        "POST",
        READ,
        {"turn": NOT_UTF8, "helper_ids": ["h1"]},
        says=("turn", "UTF-8"),
    ),
    Case(
        "read bad owner",
        _read("h1", owner="a b"),
        "POST",
        "/v1/owners/a%20b/read",
        {"turn": "t-1", "helper_ids": ["h1"]},
        says=("owner",),
    ),
    Case("read body not JSON", None, "POST", READ, b"turn=t-1", 400, says=("body: not JSON (",)),
    # delivered: the answer's length, the turn
    Case(
        "delivered zero answer chars",
        _delivered("0"),
        "POST",
        DELIVERED,
        {"turn": "t-1", "answer_chars": 0},
        says=("answer_chars", "0"),
    ),
    Case(
        "delivered negative answer chars",
        _delivered("-3"),
        "POST",
        DELIVERED,
        {"turn": "t-1", "answer_chars": -3},
        says=("answer_chars",),
    ),
    Case(
        "delivered answer chars past any chat answer",
        _delivered("1000001"),
        "POST",
        DELIVERED,
        {"turn": "t-1", "answer_chars": 1_000_001},
        says=("answer_chars", "1,000,000"),
    ),
    Case(
        "delivered answer chars not a number",
        _delivered("lots"),
        "POST",
        DELIVERED,
        {"turn": "t-1", "answer_chars": 1.5},
        says=("answer",),
    ),
    Case(
        "delivered answer chars of 5,000 digits",
        _delivered("9" * 5_000),
        "POST",
        DELIVERED,
        b'{"turn": "t-1", "answer_chars": ' + b"9" * 5_000 + b"}",
        400,
    ),
    Case(
        "delivered 201-char turn",
        _delivered(turn="t" * 201),
        "POST",
        DELIVERED,
        {"turn": "t" * 201, "answer_chars": 5},
        says=("turn", "200"),
    ),
    Case(
        "delivered empty turn", _delivered(turn=""), "POST", DELIVERED, {"turn": "", "answer_chars": 5}, says=("turn",)
    ),
    Case(
        "delivered non-UTF-8 turn",
        _delivered(turn=NOT_UTF8),
        "POST",
        DELIVERED,
        {"turn": NOT_UTF8, "answer_chars": 5},
        says=("turn", "UTF-8"),
    ),
    Case(
        "delivered bad owner",
        _delivered(owner=""),
        "POST",
        "/v1/owners/%20/delivered",
        {"turn": "t-1", "answer_chars": 5},
        says=("owner",),
    ),
    # goal add: the Goal id, how often, the check's request
    Case(
        "goal add 41-char goal id",
        _goal_add(goal="g" * 41),
        "POST",
        GOALS,
        _goal_body(goal_id="g" * 41),
        says=("goal id", "40"),
    ),
    Case("goal add bad goal id", _goal_add(goal="g g"), "POST", GOALS, _goal_body(goal_id="g g"), says=("goal id",)),
    Case(
        "goal add every too short",
        _goal_add(every="30s"),
        "POST",
        GOALS,
        _goal_body(every="30s"),
        says=("every", "minute"),
    ),
    Case(
        "goal add every too long",
        _goal_add(every="367d"),
        "POST",
        GOALS,
        _goal_body(every="367d"),
        says=("every", "366"),
    ),
    Case(
        "goal add every not a duration",
        _goal_add(every="1 fortnight"),
        "POST",
        GOALS,
        _goal_body(every="1 fortnight"),
        says=("every",),
    ),
    Case(
        "goal add every of 5,000 digits",
        _goal_add(every="9" * 5_000 + "d"),
        "POST",
        GOALS,
        _goal_body(every="9" * 5_000 + "d"),
        says=("every", "366"),
    ),
    Case(
        "goal add oversized task",
        _goal_add(task="x" * 20_001),
        "POST",
        GOALS,
        _goal_body(task="x" * 20_001),
        says=("task", "20000"),
    ),
    Case(
        "goal add non-UTF-8 task",
        _goal_add(task=NOT_UTF8),
        "POST",
        GOALS,
        _goal_body(task=NOT_UTF8),
        says=("task", "UTF-8"),
    ),
    Case(
        "goal add unknown language",
        _goal_add("--language", "xx"),
        "POST",
        GOALS,
        _goal_body(language="xx"),
        says=("language",),
    ),
    Case(
        "goal add oversized model",
        _goal_add(model="m" * 101),
        "POST",
        GOALS,
        _goal_body(model="m" * 101),
        says=("model", "100"),
    ),
    Case(
        "goal add 21 boundary items",
        _goal_add(*BOUNDARY_21_ARGS),
        "POST",
        GOALS,
        _goal_body(boundary=BOUNDARY_21),
        says=("boundary", "20"),
    ),
    Case("goal add bad owner", _goal_add(owner="a b"), "POST", "/v1/owners/a%20b/goals", _goal_body(), says=("owner",)),
    Case("goal add unknown field", None, "POST", GOALS, _goal_body(every_ms=60_000), says=("every_ms",)),
    # goal list, pause, resume, run, remove: the owner and the Goal id
    Case("goal list bad owner", ["goal", "list", "--owner", "../x"], "GET", "/v1/owners/..x/goals", says=("owner",)),
    *[
        Case(
            f"goal {name} 41-char goal id",
            ["goal", name, "--owner", OWNER, "--goal", "g" * 41],
            method,
            f"{GOALS}/{'g' * 41}{suffix}",
            says=("goal id", "40"),
        )
        for name, method, suffix in GOAL_ACTIONS
    ],
    *[
        Case(
            f"goal {name} non-UTF-8 goal id",
            ["goal", name, "--owner", OWNER, "--goal", NOT_UTF8],
            method,
            f"{GOALS}/caf%E9{suffix}",
            says=("goal id",),
        )
        for name, method, suffix in GOAL_ACTIONS
    ],
    Case(
        "goal run bad owner",
        ["goal", "run", "--owner", "", "--goal", "inbox"],
        "POST",
        "/v1/owners/%2D/goals/inbox/run",
        says=("owner",),
    ),
]

CLI_CASES = [case for case in CASES if case.argv is not None]
HTTP_CASES = [case for case in CASES if case.method]


def _assert_invalid(case: Case, error: dict[str, Any], everything: str) -> None:
    assert UNEXPECTED not in everything, everything[-2000:]
    assert error["code"] == "invalid_request", error
    assert error["message"] and error["problems"], error  # every invalid_request names its problems (docs/api.md)
    for word in case.says:
        said = " ".join([error["message"], *error.get("problems", [])]).lower()
        assert word.lower() in said, (word, error)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("invalid-requests")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))},
        "TEMPORAL_ADDRESS": NOWHERE,
        "HELPER_CORE_URL": f"http://{NOWHERE}",
        "HELPER_STORE_URL": f"sqlite+aiosqlite:///{tmp / 'helpers.sqlite3'}",
        "HELPER_RESULTS_DIR": str(tmp / "results"),
        "HELPER_STARTER_TIMEOUT_MS": "3000",
        "HELPER_ENV_FILE": os.devnull,
    }
    subprocess.run([sys.executable, "-m", "store", "migrate"], cwd=ROOT, env=env, check=True, capture_output=True)
    yield tmp, env


class _Exited(BaseException):
    def __init__(self, code: int) -> None:
        self.code = code


@pytest.mark.parametrize("case", CLI_CASES, ids=[case.name for case in CLI_CASES])
def test_the_console_script_answers_invalid(
    case: Case,
    store: tuple[Path, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """R48, R42: `helper-starter` with a connected Temporal that fails every call: exit 2 and `invalid_request`
    naming the field and the limit, never exit 3 nor the catch-all, and nothing was asked of Temporal."""
    from starter import cli
    from starter.client import HelperClient
    from starter.reads import open_store

    _, env = store
    gone = GoneTemporal()

    async def connect(cls: type[HelperClient], settings: Settings, *, temporal: bool = True) -> HelperClient:
        return cls(settings, await open_store(settings), cast(Client, gone))

    def exit_(code: int) -> None:
        raise _Exited(code)

    monkeypatch.setattr(HelperClient, "connect", classmethod(connect))
    monkeypatch.setattr(os, "_exit", exit_)
    for name in [name for name in os.environ if name.startswith(("HELPER_", "TEMPORAL_"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert case.argv is not None
    with pytest.raises(_Exited) as exited:
        cli.main(list(case.argv))
    out, err = capsys.readouterr()
    assert exited.value.code == 2, out + err
    _assert_invalid(case, json.loads(out)["error"], out + err)
    assert gone.calls == []


@pytest.fixture(scope="module")
def settings_down(store: tuple[Path, dict[str, str]]) -> Settings:
    tmp, env = store
    return Settings(
        store=env["HELPER_STORE_URL"],
        results_dir=tmp / "results",
        temporal_address=NOWHERE,
        core_url=f"http://{NOWHERE}",
        starter_timeout_ms=3_000,
    )


@pytest.fixture
async def service(settings_down: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, GoneTemporal]]:
    temporal = GoneTemporal()
    connections = Connections(settings_down, 1, temporal=cast(Client, temporal))
    async with service_client(settings_down, connections, raise_app_exceptions=False) as client:
        yield client, temporal


def _content(body: Any) -> bytes | None:
    """A body as sent: bytes as they are, anything else as JSON (its lone surrogates escaped, as JSON allows)."""
    if body is None or isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


@pytest.mark.parametrize("case", HTTP_CASES, ids=[case.name for case in HTTP_CASES])
async def test_the_service_answers_invalid(case: Case, service: tuple[httpx.AsyncClient, GoneTemporal]) -> None:
    """R48, R47: the same inputs through the service: 422 (400 for a body that is not JSON) and `invalid_request`
    naming the field and the limit, never 503 nor the catch-all, and nothing was asked of Temporal."""
    client, temporal = service
    answered = await client.request(case.method, case.path, content=_content(case.body), headers=JSON)
    assert answered.status_code == case.status, answered.text[:2000]
    _assert_invalid(case, answered.json()["error"], answered.text)
    assert temporal.calls == []


def test_the_console_script_itself_answers_invalid(store: tuple[Path, dict[str, str]]) -> None:
    """R48, R42: as the console script, with Temporal down: too many helper ids and a non-UTF-8 turn are exit 2
    `invalid_request`, not the exit 3 of a Temporal that does not answer."""
    _, env = store
    for argv in (_read(*TOO_MANY_IDS), _read("h1", turn=NOT_UTF8)):  # the turn's bytes: b"caf\xe9"
        done = subprocess.run(
            [sys.executable, "-m", "starter", *argv], cwd=ROOT, env=env, capture_output=True, timeout=60
        )
        printed = done.stdout.decode("utf-8", "replace")
        assert done.returncode == 2, printed + done.stderr.decode("utf-8", "replace")
        assert UNEXPECTED not in printed and json.loads(printed)["error"]["code"] == "invalid_request"


# --- generated inputs: the checks against the wire messages ------------------------------------------------------

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=80)  # surrogates and control characters too
IDS = st.one_of(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,70}\Z"), ANY_TEXT)
TURNS = st.one_of(st.text(min_size=0, max_size=220), ANY_TEXT, st.just("t" * 200), st.just("t" * 201))
HELPER_ID_LISTS = st.one_of(
    st.lists(IDS, max_size=5),
    st.integers(0, READ_MAX_HELPERS + 30).map(lambda count: [f"h{n}" for n in range(count)]),
)


def _refused(build: Any) -> bool:
    """Whether the wire refuses what `build` makes."""
    try:
        build()
    except (ValueError, ValidationError):
        return True
    return False


def _checked(build: Any) -> StarterError | None:
    """The starter's refusal of a command as it is built (connecting to nothing), or None."""
    try:
        build()
    except StarterError as error:
        return error
    return None


@settings(max_examples=300, deadline=None)
@given(owner=IDS, turn=TURNS, helper_ids=HELPER_ID_LISTS)
def test_a_read_the_wire_refuses_is_refused_first(owner: str, turn: str, helper_ids: list[str]) -> None:
    """R48: whatever `ReadRequest` (or the owner's id) refuses, `read` has refused, as invalid; what it takes, the
    message takes."""
    refusal = _checked(lambda: commands.read(owner, turn, helper_ids))
    wire_refuses = _refused(lambda: (check_id("owner", owner), ReadRequest(turn=turn, helper_ids=helper_ids)))
    assert refusal is None or isinstance(refusal, InvalidRequest)
    if wire_refuses:
        assert isinstance(refusal, InvalidRequest)


@settings(max_examples=200, deadline=None)
@given(owner=IDS, turn=TURNS, answer_chars=st.integers(min_value=-(10**6), max_value=10**40))
def test_a_delivered_the_wire_refuses_is_refused_first(owner: str, turn: str, answer_chars: int) -> None:
    """R48: whatever `DeliveredRequest` refuses, `delivered` has refused, as invalid."""
    refusal = _checked(lambda: commands.delivered(owner, turn, answer_chars))
    wire_refuses = (
        _refused(lambda: (check_id("owner", owner), DeliveredRequest(turn=turn, answer_chars=answer_chars)))
        or answer_chars <= 0
    )
    assert refusal is None or isinstance(refusal, InvalidRequest)
    if wire_refuses:
        assert isinstance(refusal, InvalidRequest)


@settings(max_examples=200, deadline=None)
@given(owner=IDS, helper_id=IDS, goal_id=IDS)
def test_an_id_the_wire_refuses_is_refused_first(owner: str, helper_id: str, goal_id: str) -> None:
    """R48, R40: close, show, watch and the Goal commands refuse, as invalid, every id the wire refuses, and only
    those."""
    owner_refused = _refused(lambda: check_id("owner", owner))
    helper_refused = owner_refused or _refused(lambda: check_id("helper id", helper_id))
    goal = {"owner": owner, "goal_id": goal_id, "task": "t", "model": "m", "every_ms": 60_000}
    goal_refused = owner_refused or _refused(lambda: Goal.model_validate(goal))
    for build in (
        lambda: commands.close(owner, helper_id),
        lambda: commands.show(owner, helper_id),
        lambda: commands.watch(owner, helper_id),
    ):
        refusal = _checked(build)
        assert refusal is None or isinstance(refusal, InvalidRequest)
        assert (refusal is not None) == helper_refused
    for build in (
        lambda: commands.pause_goal(owner, goal_id, paused=True),
        lambda: commands.run_goal(owner, goal_id),
        lambda: commands.remove_goal(owner, goal_id),
    ):
        refusal = _checked(build)
        assert refusal is None or isinstance(refusal, InvalidRequest)
        assert (refusal is not None) == goal_refused


@settings(max_examples=300, deadline=None)
@given(
    owner=IDS,
    helper_id=IDS,
    question_id=st.one_of(IDS, st.just("q" * 65)),
    option_id=st.one_of(st.none(), IDS),
    text=st.one_of(st.none(), ANY_TEXT, st.just("x" * 4_001)),
    by=st.one_of(st.none(), ANY_TEXT, st.just("b" * 65)),
)
def test_an_answer_the_coordinator_refuses_as_invalid_is_refused_first(
    owner: str, helper_id: str, question_id: str, option_id: str | None, text: str | None, by: str | None
) -> None:
    """R48, R49, R56: whatever the coordinator's answer validator refuses as invalid (the ids, the answer's own
    bounds, who answered), `answer` has refused first, as invalid; what it takes is a message that builds and travels
    as JSON."""
    decider = Decider(by=by, via="telegram", through="cli")
    refusal = _checked(lambda: commands.answer(owner, helper_id, question_id, option_id, text, decider))
    assert refusal is None or isinstance(refusal, InvalidRequest)
    answer = OwnerAnswer(question_id=question_id, option_id=option_id, text=text)
    validator_refuses = _refused(lambda: (check_id("owner", owner), check_id("helper id", helper_id))) or bool(
        answering.answer_problems(answer, decider)
    )
    assert (refusal is not None) == validator_refuses
    if refusal is None:
        AnswerRequest(owner=owner, helper_id=helper_id, answer=answer, decider=decider).model_dump_json()


LIMIT_VALUES = st.one_of(st.integers(-5, 10**31), st.text(max_size=5), st.none())
START_FIELDS = st.fixed_dictionaries(
    {"owner": IDS, "helper_id": IDS, "task": st.one_of(ANY_TEXT, st.just("x" * 20_001)), "model": ANY_TEXT},
    optional={
        "boundary": st.lists(st.one_of(ANY_TEXT, st.just("send_mail to bob@example.com")), max_size=22),
        "language": st.sampled_from(["en", "ru", "de", "", NOT_UTF8]),
        "goal_id": st.one_of(st.none(), IDS),
        "follow_up": st.one_of(st.none(), IDS),
        "limits": st.one_of(
            st.none(), st.dictionaries(st.sampled_from(["deadline_ms", "max_steps", "x"]), LIMIT_VALUES)
        ),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=START_FIELDS)
def test_a_start_the_wire_refuses_is_refused_first(fields: dict[str, Any]) -> None:
    """R48, R5: `start` refuses, as invalid, every request `HelperRequest` refuses, and a request it takes is a
    message that builds and travels as JSON."""
    refusal = _checked(lambda: commands.start(dict(fields), Settings()))
    assert refusal is None or isinstance(refusal, InvalidRequest)
    if refusal is None:
        HelperRequest.model_validate(fields).model_dump_json()
    else:
        assert refusal.message


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    owner=IDS,
    goal_id=IDS,
    every=st.one_of(st.sampled_from(["1h", "30s", "367d", "1 fortnight", "9" * 5_000 + "d"]), ANY_TEXT),
    task=st.one_of(ANY_TEXT, st.just("x" * 20_001)),
    language=st.sampled_from(["en", "xx", NOT_UTF8]),
    boundary=st.lists(st.one_of(ANY_TEXT, st.just("send_mail to bob@example.com")), max_size=22),
)
def test_a_goal_the_wire_refuses_is_refused_first(
    owner: str, goal_id: str, every: str, task: str, language: str, boundary: list[str]
) -> None:
    """R48, R30: `goal add` refuses, as invalid, every Goal the wire refuses (the Goal, its checks' request)."""
    fields = {
        "owner": owner,
        "goal_id": goal_id,
        "task": task,
        "model": "m",
        "language": language,
        "boundary": boundary,
    }
    refusal = _checked(lambda: commands.add_goal(fields, every))
    assert refusal is None or isinstance(refusal, InvalidRequest)
    if refusal is None:
        Goal.parse({**fields, "every_ms": 3_600_000}).model_dump_json()


@dataclass
class Served:
    """The service on an event loop of its own, for a test that hypothesis calls synchronously."""

    runner: asyncio.Runner
    client: httpx.AsyncClient
    temporal: GoneTemporal

    def post(self, path: str, content: bytes) -> httpx.Response:
        return self.runner.run(self.client.post(path, content=content, headers=JSON))


@pytest.fixture(scope="module")
def generated_service(settings_down: Settings) -> Iterator[Served]:
    temporal = GoneTemporal()
    options = settings_down.service
    app = create_app(settings_down, Connections(settings_down, 1, temporal=cast(Client, temporal)))
    transport = httpx.ASGITransport(app=with_guards(app, options), raise_app_exceptions=False)
    with asyncio.Runner() as runner:
        client = httpx.AsyncClient(transport=transport, base_url="http://api", timeout=30)
        try:
            yield Served(runner, client, temporal)
        finally:
            runner.run(client.aclose())
            runner.run(app.state.service.connections.aclose())


READ_BODIES = st.one_of(
    st.fixed_dictionaries({"turn": TURNS, "helper_ids": HELPER_ID_LISTS}),
    st.dictionaries(st.sampled_from(["turn", "helper_ids", "owner"]), st.one_of(TURNS, HELPER_ID_LISTS, st.integers())),
)
DELIVERED_BODIES = st.one_of(
    st.fixed_dictionaries({"turn": TURNS, "answer_chars": st.integers(-5, 10**40)}),
    st.dictionaries(st.sampled_from(["turn", "answer_chars"]), st.one_of(TURNS, st.integers(), st.floats())),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(["read", "delivered"]), data=st.data())
def test_generated_bodies_are_invalid_or_unavailable_never_unexpected(
    generated_service: Served, route: str, data: st.DataObject
) -> None:
    """R48: generated `read` and `delivered` bodies through the service, to a Temporal that fails every call: a
    body the wire refuses is 422 `invalid_request` and asks Temporal nothing; any other is 422 too, or 503 from
    Temporal's failure (a transport failure); never the catch-all."""
    temporal = generated_service.temporal
    body = data.draw(READ_BODIES if route == "read" else DELIVERED_BODIES)
    asked = len(temporal.calls)
    answered = generated_service.post(f"{API}/{route}", json.dumps(body).encode())
    error = answered.json()["error"]
    assert UNEXPECTED not in error["message"], error
    try:
        if route == "read":
            wire_refuses = set(body) != {"turn", "helper_ids"} or not ReadRequest.model_validate(body)
        else:
            delivered = DeliveredRequest.model_validate(body)
            wire_refuses = set(body) != {"turn", "answer_chars"} or delivered.answer_chars <= 0
    except ValidationError:
        wire_refuses = True
    if wire_refuses:
        assert (answered.status_code, error["code"]) == (422, "invalid_request"), error
        assert len(temporal.calls) == asked
    else:
        assert (answered.status_code, error["code"]) in ((422, "invalid_request"), (503, "unavailable")), error


def test_the_checks_and_the_messages_share_their_limits() -> None:
    """R48: a read's bounds are defined once (`domain.limits`), for the wire message and the starter's checks."""
    from annotated_types import MaxLen, MinLen

    assert MaxLen(READ_MAX_HELPERS) in ReadRequest.model_fields["helper_ids"].metadata
    for message in (ReadRequest, DeliveredRequest):
        assert {MinLen(1), MaxLen(TURN_MAX_CHARS)} <= set(message.model_fields["turn"].metadata)
    assert _checked(lambda: commands.read(OWNER, "t" * TURN_MAX_CHARS, TOO_MANY_IDS[:-1])) is None
