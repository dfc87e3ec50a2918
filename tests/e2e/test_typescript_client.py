"""R47, R50: Iva's side of the starter API, as Iva's TypeScript service calls it: the typed client in
client-typescript/ (types generated from docs/api/openapi.json by openapi-typescript, calls over openapi-fetch, the
live lines through its Server-Sent Events reader), compiled by tsc --strict, driving the whole contract against the
service on the real stack. `npm ci` installs the lockfile's packages (from npm's cache when it has them), so this
is a slow test: `make test` needs no Node packages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from reference.core.script import scripted_task
from tests.e2e.conftest import Stack
from tests.e2e.test_api import serving_api
from tests.helpers import rows_of, run_bounded

CLIENT = Path(__file__).resolve().parents[2] / "client-typescript"
NODE, NPM = shutil.which("node"), shutil.which("npm")
NPM_CI_S = 300
BUILD_S = 120
CONTRACT_S = 240

pytestmark = [pytest.mark.slow, pytest.mark.skipif(NPM is None or NODE is None, reason="Node.js is not installed")]


@pytest.fixture(scope="module")
def contract_program() -> Path:
    """The client installed from its lockfile, its types generated from the document, all compiled."""
    assert NPM is not None
    environment = {**os.environ, "npm_config_audit": "false", "npm_config_fund": "false"}
    for command, bound in ((["ci", "--prefer-offline"], NPM_CI_S), (["run", "build"], BUILD_S)):
        done = subprocess.run(
            [NPM, *command], cwd=CLIENT, env=environment, capture_output=True, text=True, timeout=bound, check=False
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return CLIENT / "dist" / "test" / "contract.js"


async def _contract(program: Path, url: str, owner: str, mode: str) -> dict[str, Any]:
    assert NODE is not None
    tasks = {
        "quick": "Find the Q3 report",
        "slow": scripted_task("Watch the mailbox.", steps=600, step_ms=500),
        "question": scripted_task(
            "Plan the offsite.",
            steps=1,
            step_ms=50,
            end="question",
            question="Where?",
            question_id="venue",
            options=[("walk", "Walking distance"), ("taxi", "Taxi")],
        ),
        "authorization": scripted_task(
            "Tell the team.",
            steps=1,
            step_ms=50,
            end="authorization",
            authorization="send_mail to bob@example.com, carol@example.com",
        ),
    }
    plan = json.dumps({"baseUrl": url, "owner": owner, "mode": mode, "tasks": tasks})
    code, out, err = await run_bounded(NODE, str(program), plan, timeout=CONTRACT_S)
    assert code == 0, out[-3000:] + err[-6000:]
    statuses: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return statuses


async def test_iva_drives_the_whole_contract_through_the_typed_client(contract_program: Path, stack: Stack) -> None:
    """start (201) and the same start (200), watch to the end event and resumed from a line (Last-Event-ID),
    unreported, read, delivered, list, show, usage, close, too many open, an answer to a question (once), a grant
    narrowed (and one that widens, refused), Goals
    added, listed, paused, resumed and removed; and each refusal's status and error code, as docs/api.md says."""
    async with serving_api(stack) as url:
        statuses = await _contract(contract_program, url, stack.owner, "contract")
    assert statuses == {
        "start": 201,
        "again": 200,
        "invalid": 422,
        "unknown_model": 422,
        "follow_up_unknown": 404,
        "watch_bad_id": 422,
        "watch_unknown": 404,
        "unreported": 200,
        "read_unknown": 404,
        "read": 200,
        "delivered": 200,
        "list": 200,
        "show": 200,
        "show_unknown": 404,
        "usage": 200,
        "close": 200,
        "too_many_open": 409,
        "not_offered": 409,
        "waits": 200,
        "answer": 200,
        "answers": 200,
        "audit": 200,
        "grant_widens": 409,
        "grant": 200,
        "goal_add": 201,
        "goal_exists": 409,
        "goal_invalid": 422,
        "goal_list": 200,
        "goal_pause": 200,
        "goal_resume": 200,
        "goal_remove": 200,
        "goal_unknown": 404,
    }


async def test_iva_reads_busy_and_unavailable_through_the_typed_client(contract_program: Path, stack: Stack) -> None:
    """R48: three starts at once to a service that sends one write at a time to a task queue no worker polls: the
    first is 503 `unavailable`, the others 429 `busy`, each with a Retry-After equal to its body's retry_after_s,
    and nothing was admitted."""
    unserved = stack.settings.model_copy(
        update={"task_queue": "nobody-polls-this", "starter_timeout_ms": 2_000, "starter_max_in_flight": 1}
    )
    async with serving_api(stack, unserved) as url:
        statuses = await _contract(contract_program, url, stack.owner, "refusals")
    assert statuses == {"starts": [429, 429, 503]}
    assert await rows_of(stack.store, stack.owner) == []
