"""`helper-starter`: the console script Iva calls. JSON on stdout; a non-zero exit code on any error.

Exit codes: 0 done, 1 refused (limits, unknown helper), 2 invalid input, 3 runtime unavailable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from domain.goals import parse_every
from domain.requests import RequestError
from domain.rows import RowState
from domain.settings import Settings, SettingsError
from starter.client import HelperClient
from starter.errors import InvalidRequest, StarterError, Unavailable

WRITES = {"start", "close", "read", "delivered", "goal"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="helper-starter", description="Start and manage Iva's helpers.")
    commands = parser.add_subparsers(dest="command", required=True)

    start = commands.add_parser(
        "start", help="admit a helper (answers at once: running, or waiting and how many ahead)"
    )
    _owner(start)
    start.add_argument("--id", required=True, dest="helper_id")
    task = start.add_mutually_exclusive_group(required=True)
    task.add_argument("--task", help="the task text")
    task.add_argument("--task-file", type=Path, help="read the task (UTF-8) from this file; '-' for stdin")
    start.add_argument("--boundary", action="append", default=[], help="an action the owner named (repeatable)")
    start.add_argument("--language", default="en")
    start.add_argument("--model", required=True, help="the owner's selected model")
    start.add_argument("--goal", dest="goal_id", help="the Goal this check belongs to")
    for name in ("deadline-ms", "grace-ms", "ceiling-tokens", "max-steps", "max-input-tokens"):
        start.add_argument(f"--{name}", type=int, help="a tighter limit for this helper")

    listing = commands.add_parser("list", help="the owner's helper rows, from the store")
    _owner(listing)
    listing.add_argument("--state", action="append", choices=[s.value for s in RowState])

    show = commands.add_parser("show", help="one helper with its full outcome text")
    _owner(show)
    show.add_argument("--id", required=True, dest="helper_id")

    close = commands.add_parser("close", help="close a helper (running, ready or delivered)")
    _owner(close)
    close.add_argument("--id", required=True, dest="helper_id")

    unreported = commands.add_parser("unreported", help="finalized outcomes not yet delivered, with summaries")
    _owner(unreported)

    read = commands.add_parser("read", help="record that a chat turn read these outcomes")
    _owner(read)
    read.add_argument("--turn", required=True)
    read.add_argument("helper_ids", nargs="+")

    delivered = commands.add_parser("delivered", help="the turn answered (nonempty) and completed: mark what it read")
    _owner(delivered)
    delivered.add_argument("--turn", required=True)
    delivered.add_argument("--answer-chars", type=int, required=True, help="length of the answer the turn sent")
    usage = commands.add_parser("usage", help="usage per helper and per model (kept after rows expire)")
    _owner(usage)

    goal = commands.add_parser("goal", help="Goals: checks that run as helpers on a Temporal Schedule")
    goal_commands = goal.add_subparsers(dest="goal_command", required=True)
    add = goal_commands.add_parser("add", help="create a Goal and its Schedule")
    _owner(add)
    add.add_argument("--goal", required=True, dest="goal_id")
    add.add_argument("--every", required=True, help="how often a check runs: 30m, 1h, 1d")
    add.add_argument("--task", required=True)
    add.add_argument("--boundary", action="append", default=[])
    add.add_argument("--language", default="en")
    add.add_argument("--model", required=True)
    goal_list = goal_commands.add_parser("list", help="the owner's Goals")
    _owner(goal_list)
    for name, text in (
        ("pause", "stop the checks for now"),
        ("resume", "start the checks again"),
        ("run", "run one check now"),
        ("remove", "remove the Goal and its Schedule"),
    ):
        one = goal_commands.add_parser(name, help=text)
        _owner(one)
        one.add_argument("--goal", required=True, dest="goal_id")
    return parser


def _owner(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--owner", required=True)


def _read_task(arguments: argparse.Namespace) -> str:
    if arguments.task is not None:
        return str(arguments.task)
    source: Path = arguments.task_file
    try:
        raw = sys.stdin.buffer.read() if str(source) == "-" else source.read_bytes()
    except OSError as error:
        raise InvalidRequest(f"task file {source} cannot be read: {error.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidRequest(f"task file is not valid UTF-8 (bad byte at position {error.start})") from None


def _request(arguments: argparse.Namespace) -> dict[str, Any]:
    limits = {
        field: getattr(arguments, field)
        for field in ("deadline_ms", "grace_ms", "ceiling_tokens", "max_steps", "max_input_tokens")
        if getattr(arguments, field) is not None
    }
    return {
        "owner": arguments.owner,
        "helper_id": arguments.helper_id,
        "task": _read_task(arguments),
        "boundary": arguments.boundary,
        "language": arguments.language,
        "model": arguments.model,
        "goal_id": arguments.goal_id,
        "limits": limits or None,
    }


async def run(arguments: argparse.Namespace, settings: Settings) -> Any:
    request = _request(arguments) if arguments.command == "start" else None
    client = await HelperClient.connect(settings, temporal=arguments.command in WRITES)
    try:
        match arguments.command:
            case "start":
                assert request is not None
                return await client.start(request)
            case "list":
                states = [RowState(s) for s in arguments.state] if arguments.state else None
                return await client.list_helpers(arguments.owner, states)
            case "show":
                return await client.show(arguments.owner, arguments.helper_id)
            case "close":
                return await client.close(arguments.owner, arguments.helper_id)
            case "unreported":
                return await client.unreported(arguments.owner)
            case "read":
                return await client.read(arguments.owner, arguments.turn, arguments.helper_ids)
            case "delivered":
                return await client.delivered(arguments.owner, arguments.turn, arguments.answer_chars)
            case "usage":
                return await client.usage(arguments.owner)
            case "goal":
                return await _goal(client, arguments)
        raise InvalidRequest(f"unknown command {arguments.command}")
    finally:
        await client.aclose()


async def _goal(client: HelperClient, arguments: argparse.Namespace) -> Any:
    match arguments.goal_command:
        case "add":
            every = parse_every(arguments.every)
            return await client.add_goal(
                {
                    "owner": arguments.owner,
                    "goal_id": arguments.goal_id,
                    "task": arguments.task,
                    "boundary": arguments.boundary,
                    "language": arguments.language,
                    "model": arguments.model,
                    "every_ms": int(every.total_seconds() * 1000),
                }
            )
        case "list":
            return await client.list_goals(arguments.owner)
        case "pause" | "resume":
            return await client.pause_goal(arguments.owner, arguments.goal_id, paused=arguments.goal_command == "pause")
        case "run":
            return await client.run_goal_now(arguments.owner, arguments.goal_id)
        case "remove":
            return await client.remove_goal(arguments.owner, arguments.goal_id)
    raise InvalidRequest(f"unknown goal command {arguments.goal_command}")


def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_json(item) for item in value]
    return value


def main(argv: list[str] | None = None) -> None:
    arguments = build_parser().parse_args(argv)
    code = 0
    try:
        settings = Settings.from_env()
        output = _json(asyncio.run(run(arguments, settings)))
    except SettingsError as error:
        output, code = Unavailable(str(error)).as_json(), Unavailable.exit_code
    except RequestError as error:
        invalid = InvalidRequest(str(error), {"problems": error.problems})
        output, code = invalid.as_json(), invalid.exit_code
    except StarterError as error:
        output, code = error.as_json(), error.exit_code
    print(json.dumps(output, ensure_ascii=False, indent=2))
    sys.stdout.flush()
    # sdk-python#300: skip interpreter teardown so a finished command never exits with a crash code.
    os._exit(code)
