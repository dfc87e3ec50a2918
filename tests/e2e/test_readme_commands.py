"""The README's commands, pasted in the order written into a second shell while `make run` runs, each checked against
what the text beside it says; README.ru.md holds the same commands with the same claims.

The stack is `python -m tools.demo run` (what `make run` runs) with two worker replicas (`make run WORKERS=2`), on
six free ports with a data folder of its own. It runs the demo scenario first, so the demo's helpers the README
names are there. The second shell finds the stack's settings through HELPER_ENV_FILE, as the README says for a stack
outside the checkout; the addresses the README writes (7233, 8330, 8340) become the stack's. A comment beside a
command that quotes a field of its answer (`"removed": true`) or an exit code (`exit 1`) is checked as written;
each command's own checks are what the text around it says.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.local_run import KEEPS_RUNNING, ROOT, Running, clean_env, start_run, stopped_cleanly

pytestmark = pytest.mark.e2e

README = ROOT / "README.md"
README_RU = ROOT / "README.ru.md"
USING_IT = {README: "## Using it", README_RU: "## Как пользоваться"}
STARTER = ".venv/bin/helper-starter"
# A field of the answer quoted in a command's comment, and an exit code it names.
CLAIM = re.compile(r'"(\w+)": ("[^"]*"|true|false|null|-?\d+)')
EXIT = re.compile(r"\bexit (\d)\b")
COMMENT = re.compile(r"\s+#\s")


@dataclass(frozen=True)
class Pasted:
    """One command of a README block as a person pastes it, with what its comment claims."""

    command: str  # the whole line, comment included (the shell ignores it)
    comment: str

    @property
    def claims(self) -> dict[str, Any]:
        return {key: json.loads(value) for key, value in CLAIM.findall(self.comment)}

    @property
    def exit_code(self) -> int:
        found = EXIT.search(self.comment)
        return int(found[1]) if found else 0


def sh_blocks(readme: Path, section: str | None = None) -> list[list[Pasted]]:
    """The `sh` blocks of a README (of one `## ` section if named; blocks inside list items too), each as its
    commands, continuation lines joined, comment lines left out."""
    text = readme.read_text(encoding="utf-8")
    if section is not None:
        text = text.split(section, 1)[1].split("\n## ", 1)[0]
    blocks = []
    for indent, body in re.findall(r"^( *)```sh\n(.*?)^\1```", text, re.S | re.M):
        commands: list[Pasted] = []
        pending = ""
        for raw in body.splitlines():
            line = raw.removeprefix(indent)
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            line = pending + line
            pending = ""
            if line.strip() and not line.lstrip().startswith("#"):
                parts = COMMENT.split(line, maxsplit=1)
                commands.append(Pasted(line, parts[1] if len(parts) > 1 else ""))
        blocks.append(commands)
    return blocks


def block_with(commands: str, readme: Path = README) -> list[Pasted]:
    """The block under "Using it" that holds `commands`."""
    found = [block for block in sh_blocks(readme, USING_IT[readme]) if any(commands in p.command for p in block)]
    assert len(found) == 1, f"{readme.name}: {len(found)} blocks under 'Using it' hold {commands!r}"
    return found[0]


def test_the_russian_readme_pastes_the_same_commands_with_the_same_claims() -> None:
    """README.ru.md's blocks are README.md's, block for block: the same commands (comments translated), the same
    quoted fields and exit codes; so the walk below, run on README.md's, holds for both."""

    def shape(readme: Path) -> list[list[tuple[str, dict[str, Any], int]]]:
        return [[(COMMENT.split(p.command)[0], p.claims, p.exit_code) for p in block] for block in sh_blocks(readme)]

    assert shape(README_RU) == shape(README)
    assert len(sh_blocks(README, USING_IT[README])) == len(sh_blocks(README_RU, USING_IT[README_RU])) >= 5


# --- the walk --------------------------------------------------------------------------------------------------


class Shell:
    """A second shell from the checkout: none of the stack's variables but the settings file; the clock in UTC, so
    a line's time can be compared with the row's."""

    def __init__(self, run: Running) -> None:
        self.run = run
        self.env = {**clean_env(), "HELPER_ENV_FILE": str(run.data / "local.env"), "TZ": "UTC"}
        base = run.base
        self.ports = {":7233": f":{base}", ":8330": f":{base + 4}", ":8340/": f":{base + 5}/"}

    def paste(self, command: str, timeout: float = 120) -> tuple[int, str]:
        for written, actual in self.ports.items():
            command = command.replace(f"127.0.0.1{written}", f"127.0.0.1{actual}")
        if not (ROOT / ".venv" / "bin" / "helper-starter").exists():  # outside `make`'s virtual environment
            command = command.replace(".venv/bin/", f"{Path(sys.executable).parent}/")
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=self.env, capture_output=True, timeout=timeout)
        out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        assert "Traceback" not in out + err, f"{command}\n{out}\n{err}"
        return done.returncode, out

    def answer(self, pasted: Pasted) -> Any:
        """Run a console-script command; its exit code and the fields its comment quotes are as written."""
        code, out = self.paste(pasted.command)
        assert code == pasted.exit_code, f"{pasted.command}\nexit {code}\n{out}"
        value = json.loads(out)
        _holds(pasted, value)
        return value

    def show(self, owner: str, helper_id: str) -> dict[str, Any]:
        code, out = self.paste(f"{STARTER} show --owner {owner} --id {helper_id}")
        assert code == 0, out
        shown: dict[str, Any] = json.loads(out)
        return shown


def _holds(pasted: Pasted, value: Any) -> None:
    fields = value.get("error", value) if isinstance(value, dict) else {}
    for key, claimed in pasted.claims.items():
        actual = fields.get(key)
        assert type(actual) is type(claimed) and actual == claimed, f"{pasted.command}\n{key}: {actual!r}\n{value}"


def _eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.5)


@pytest.fixture
def make_run(tmp_path: Path, cleanup: list[Running]) -> Running:
    """`make run WORKERS=2` in its own terminal, once the demo has given its verdict."""
    running = start_run(tmp_path, through_pipe=False, workers=2)
    cleanup.append(running)
    running.wait_for(KEEPS_RUNNING, timeout=240)
    assert "Every demo helper reached the outcome the scenario expects." in running.output()
    return running


def test_every_readme_command_does_what_the_text_beside_it_says(make_run: Running) -> None:
    shell = Shell(make_run)

    # "In a second shell, `helper-starter watch --owner anna` shows the same live lines" (until Ctrl-C).
    watch = subprocess.Popen(
        ["bash", "-c", f"exec {STARTER} watch --owner anna"], cwd=ROOT, env=shell.env, stdout=subprocess.PIPE
    )
    try:
        time.sleep(3)
        watch.send_signal(signal.SIGINT)
        lines, _ = watch.communicate(timeout=30)
    finally:
        watch.kill()
    assert watch.returncode == 0 and "anna/mail-report" in lines.decode() and "anna/pick-venue" in lines.decode()

    _using_it(shell)
    _follow_up(shell)
    _over_http(shell)
    _models(shell)
    _temporal_cli(shell)
    _replicas(shell, make_run)

    os.killpg(make_run.process.pid, signal.SIGINT)
    assert stopped_cleanly(make_run) == []


def _using_it(shell: Shell) -> None:
    """The console script's block, in its order."""
    for pasted in block_with("--id report-q3 --model scripted"):
        command = pasted.command
        if " watch " in command and "--once" not in command:
            # Its live lines until its outcome: the mail its task asks for, sent to Bob.
            code, out = shell.paste(command, timeout=90)
            assert code == 0, out
            assert "outcome completed" in out and "Actions: send_mail → bob@example.com." in out, out
            assert "action · send_mail · bob@example.com: sent a mail" in out.splitlines()[-1], out
            continue
        if "--once" in command:
            # The lines of every helper, the demo's too, each at the time it happened.
            code, out = shell.paste(command)
            assert code == 0, out
            ended = shell.show("anna", "mail-report")["finished_at"]
            said = f"{datetime.fromisoformat(ended):%H:%M:%S}  anna/mail-report         delivered · outcome completed"
            assert said in out and "anna/report-q3" in out, out
            continue
        answer = shell.answer(pasted)
        if " goal add " in command:
            assert (answer["goal_id"], answer["every_ms"]) == ("inbox", 3_600_000), answer
        elif " goal list " in command:
            assert [goal["goal_id"] for goal in answer] == ["inbox"], answer
        elif " goal remove " in command:
            assert shell.answer(Pasted(f"{STARTER} goal list --owner anna", "")) == []
        elif " start " in command:
            assert answer["status"] in ("running", "waiting") and answer["existing"] is False, answer
        elif " list " in command:
            assert {"report-q3", "pick-room", "mail-report", "market-scan"} <= {row["helper_id"] for row in answer}
        elif " show " in command:
            mail = [(a["tool"], a["whom"]) for a in answer["actions"]]
            assert mail == [("send_mail", "bob@example.com")] and "Q3" in answer["actions"][0]["what"], answer
        elif " unreported " in command:
            assert "report-q3" in [row["helper_id"] for row in answer], answer
        elif " read " in command:
            assert answer["read"] == ["report-q3"], answer
        elif " delivered " in command:
            assert answer["delivered"] == ["report-q3"], answer
        elif " answer " in command and "--id tell-team" in command:
            # Narrowed: asked to mail Bob and Carol, the grant lets one mail go, to Carol only.
            asked, granted = "send_mail to bob@example.com, carol@example.com", "send_mail to carol@example.com"
            assert (answer["asked"], answer["granted"], answer["repeated"]) == (asked, granted, False), answer
            _eventually(lambda: shell.show("anna", "tell-team.answer")["outcome_kind"] == "completed", 60, "tell-team")
            sent = [(a["tool"], a["whom"]) for a in shell.show("anna", "tell-team.answer")["actions"]]
            assert sent == [("send_mail", "carol@example.com")], sent
        elif " answer " in command:
            # Once: the answer starts the follow-up `<id>.answer`; a second one gets this one back.
            assert answer["repeated"] is False and answer["follow_up"]["helper_id"] == "pick-room.answer", answer
            again = shell.answer(pasted)
            assert again["repeated"] is True and again["follow_up"]["helper_id"] == "pick-room.answer", again
        elif " audit " in command:
            # The answer above ended pick-room's wait: one record, of the answer, against what the row showed.
            [record] = answer["records"]
            assert (record["ended"], record["answer"]["option_id"]) == ("answered", "hall"), record
            assert len(record["shown_sha256"]) == 64 and "Which room?" in record["shown_text"], record
        elif " waits " in command:
            # pick-room asked its question (the walk's answer below takes it); no turn has read it yet.
            [asking] = [wait for wait in answer if wait["helper_id"] == "pick-room"]
            assert (asking["question_id"], asking["delivered_at"]) == ("room", None), asking
        elif " idle " in command:
            # The demo's chat is idle, so its events are delivered at once and none waits, unless one is offered now.
            assert answer["owner"] == "anna" and isinstance(answer["told"], bool), answer
        elif " close " in command:
            assert answer["state"] == "closed", answer
        elif " usage " in command:
            assert "report-q3" in [line["helper_id"] for line in answer["helpers"]], answer
        else:
            raise AssertionError(f"a README command this walk does not check: {command}")


def _follow_up(shell: Shell) -> None:
    """The follow-up of the demo's market-scan continues it, and `show` names the link both ways."""
    for pasted in block_with("--follow-up"):
        answer = shell.answer(pasted)
        if " start " in pasted.command:
            assert (answer["helper_id"], answer["existing"]) == ("scan-more", False), answer
    _eventually(lambda: shell.show("anna", "scan-more")["outcome_kind"] == "completed", 60, "scan-more's outcome")
    assert "continued the work of helper market-scan" in shell.show("anna", "scan-more")["summary"]


def _over_http(shell: Shell) -> None:
    """The starter API's block, pasted as one script: each call answers what its console command does."""
    commands = block_with("API=http://127.0.0.1:8340/")
    separator = "=====the next call====="
    script = "set -eu\n" + "".join(f"{p.command}\necho\necho {separator}\n" for p in commands)
    code, out = shell.paste(script, timeout=180)
    assert code == 0, out
    answers = out.split(separator)[:-1]
    assert len(answers) == len(commands)
    for pasted, answer in zip(commands[1:], answers[1:], strict=True):
        if "/watch" in pasted.command:  # Server-Sent Events until its outcome
            assert answer.strip().splitlines()[-1].startswith('data: {"reason": "outcome"'), answer
            continue
        value = json.loads(answer)
        assert not (isinstance(value, dict) and "error" in value), f"{pasted.command}\n{answer}"
        _holds(pasted, value)
        if "/answer" in pasted.command:
            assert value["follow_up"]["helper_id"] == "pick-dinner.answer", value
        elif pasted.command.endswith("/close") or "/close " in pasted.command:
            assert value["removed"] is True, value


def _models(shell: Shell) -> None:
    """ "The starter refuses one the core does not offer and names those it does."""
    code, out = shell.paste(f"{STARTER} start --owner anna --id x --model gpt-5 --task 'Find it'")
    error = json.loads(out)["error"]
    assert code == 2 and error["code"] == "invalid_request" and "it offers: scripted" in error["message"], out


def _temporal_cli(shell: Shell) -> None:
    """The `temporal` CLI with the local codec server shows report-q3's task readable; without it, encrypted."""
    show, listing = block_with("workflow show")
    code, out = shell.paste(show.command)
    assert code == 0 and "Find the Q3 report and mail it to Bob" in out and "binary/encrypted" not in out, out
    code, out = shell.paste(re.sub(r"--codec-endpoint \S+", "", show.command))
    assert code == 0 and "binary/encrypted" in out and "Find the Q3 report" not in out, out
    code, out = shell.paste(listing.command)
    assert code == 0 and "helpers/anna/helper/report-q3" in out and "helpers/anna/coordinator" in out, out


def _replicas(shell: Shell, make_run: Running) -> None:
    """Three slow helpers for one owner, the fourth refused; `kill <pid>` of a replica is told in `make run`'s
    terminal, the replica reaped, and the helpers go on in the other."""
    slow, fourth = block_with("--id slow-4")
    code, out = shell.paste(slow.command)
    assert code == 0, out
    decoder, answers, rest = json.JSONDecoder(), [], out.strip()
    while rest:  # the loop's three answers, one after another
        value, end = decoder.raw_decode(rest)
        answers.append(value)
        rest = rest[end:].strip()
    assert [(a["helper_id"], a["status"]) for a in answers] == [(f"slow-{n}", "running") for n in (1, 2, 3)], out
    shell.answer(fourth)  # exit 1, too_many_open, as its comment says

    pid = int(re.search(r"worker-1: pid (\d+)", make_run.output())[1])  # type: ignore[index]
    steps = {n: shell.show("carl", f"slow-{n}")["steps"] for n in (1, 2, 3)}
    os.kill(pid, signal.SIGTERM)  # `kill <pid>`
    told = re.compile(
        rf"worker-1 \(pid {pid}\) (exited with code -?\d+|was killed by SIG\w+); its log: \S+worker-1\.log"
    )
    _eventually(lambda: told.search(make_run.output()) is not None, 60, "make run's line about worker-1")
    assert "It is not restarted: the other replicas (worker-2) go on with its helpers." in make_run.output()
    _eventually(lambda: not Path(f"/proc/{pid}").exists(), 10, "worker-1 reaped")
    _eventually(
        lambda: all(shell.show("carl", f"slow-{n}")["steps"] > steps[n] + 1 for n in (1, 2, 3)),
        60,
        "every slow helper going on after the replica stopped",
    )
