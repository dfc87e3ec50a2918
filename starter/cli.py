"""`helper-starter`: the console script Iva calls (R42).

Its contract, always: exit 0 done, 1 refused (limits, unknown helper or Goal), 2 invalid (the request, the
command line or the starter's configuration), 3 unavailable (the store or Temporal did not answer or accept in
time: nothing was taken, asking again is safe), 4 accepted (Temporal accepted the write, which will be carried
out, but its answer did not come in time), 5 busy (refused before anything was sent; ask again after
`retry_after_s`). A write is answered within HELPER_STARTER_TIMEOUT_MS (R48). Every answer and every error is one
JSON object on stdout; an error also writes one short line to stderr; never a traceback. All input is validated
before any connection to the store or Temporal, so an invalid request is refused the same way whether the runtime
is up or down, and nothing is written (R5).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from config.settings import Settings, SettingsError
from domain.ids import clip
from domain.limits import LimitOverrides
from protocol.deadlines import ReplyBy, reply_by
from protocol.errors import InvalidConfiguration, InvalidRequest, StarterError, Unavailable
from starter import commands
from starter.arguments import build_parser
from starter.commands import Command
from starter.output import error_json, result_json, safe_text
from starter.reads import StoreReader, open_sqlite_reader

STDERR_MAX_CHARS = 300


def _read_task(arguments: argparse.Namespace) -> str:
    if arguments.task is not None:
        return str(arguments.task)
    source: Path = arguments.task_file
    try:
        raw = sys.stdin.buffer.read() if str(source) == "-" else source.read_bytes()
    except OSError as error:
        raise InvalidRequest(f"task file {source} cannot be read: {error.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidRequest(f"task file is not valid UTF-8 (bad byte at position {error.start})") from None
    if "\x00" in text:
        raise InvalidRequest(f"task file is not text (a NUL byte at position {text.index(chr(0))})")
    return text


# `answers`' JSON: 20 answers of 4,000 characters fit many times over; a larger file is not one.
ANSWERS_FILE_MAX_BYTES = 1024 * 1024


def _answers_body(source: Path) -> object:
    """The JSON body of `answers`, from a file or stdin ('-'), bounded."""
    try:
        with contextlib.nullcontext(sys.stdin.buffer) if str(source) == "-" else source.open("rb") as stream:
            raw = stream.read(ANSWERS_FILE_MAX_BYTES + 1)
    except OSError as error:
        raise InvalidRequest(f"answers file {source} cannot be read: {error.strerror}") from None
    if len(raw) > ANSWERS_FILE_MAX_BYTES:
        raise InvalidRequest(f"answers file is larger than {ANSWERS_FILE_MAX_BYTES:,} bytes")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidRequest(f"answers file is not JSON: {error}") from None


def prepare(arguments: argparse.Namespace, settings: Settings) -> Command:
    """Validate every input of the command, connecting to nothing, and return what to run once connected (R42)."""
    owner: str = arguments.owner
    match arguments.command:
        case "start":
            limits = {
                field: getattr(arguments, field)
                for field in LimitOverrides.model_fields
                if getattr(arguments, field) is not None
            }
            fields = {
                "owner": owner,
                "helper_id": arguments.helper_id,
                "task": _read_task(arguments),
                "boundary": arguments.boundary,
                "language": arguments.language,
                "model": arguments.model,
                "goal_id": arguments.goal_id,
                "limits": limits or None,
                "follow_up": arguments.follow_up,
                "wait": _wait(arguments),
            }
            return commands.start(fields, settings)
        case "list":
            return commands.list_helpers(owner, arguments.state)
        case "show":
            return commands.show(owner, arguments.helper_id)
        case "close":
            return commands.close(owner, arguments.helper_id)
        case "answer":
            from domain.messages.updates import Decider  # only an answer loads the messages (R43)

            return commands.answer(
                owner,
                arguments.helper_id,
                arguments.question_id,
                arguments.option_id,
                arguments.text,
                Decider(by=arguments.by, via=arguments.via, through="cli"),
            )
        case "unreported":
            return commands.unreported(owner)
        case "waits":
            return commands.waits(owner)
        case "audit":
            return commands.audit(owner, arguments.helper_id, arguments.before, arguments.limit)
        case "answers":
            return commands.answers(owner, _answers_body(arguments.file), "cli")
        case "read":
            return commands.read(owner, arguments.turn, arguments.helper_ids)
        case "delivered":
            return commands.delivered(owner, arguments.turn, arguments.answer_chars)
        case "idle":
            return commands.chat_idle(owner)
        case "usage":
            return commands.usage(owner)
        case "watch":
            helper_id: str | None = arguments.helper_id
            commands.watch(owner, helper_id)
            from starter.watch import follow_until_interrupted

            return Command(
                "watch",
                lambda client, _: follow_until_interrupted(client, owner, helper_id, _print_line, once=arguments.once),
                needs_temporal=False,
                streams=True,
            )
        case "goal":
            return _prepare_goal(arguments)
    raise InvalidRequest(f"unknown command {clip(str(arguments.command))}")


def _prepare_goal(arguments: argparse.Namespace) -> Command:
    owner: str = arguments.owner
    match arguments.goal_command:
        case "add":
            fields = {
                "owner": owner,
                "goal_id": arguments.goal_id,
                "task": arguments.task,
                "boundary": arguments.boundary,
                "language": arguments.language,
                "model": arguments.model,
            }
            return commands.add_goal(fields, arguments.every)
        case "list":
            return commands.list_goals(owner)
        case "pause" | "resume":
            return commands.pause_goal(owner, arguments.goal_id, paused=arguments.goal_command == "pause")
        case "run":
            return commands.run_goal(owner, arguments.goal_id)
        case "remove":
            return commands.remove_goal(owner, arguments.goal_id)
    raise InvalidRequest(f"unknown goal command {clip(str(arguments.goal_command))}")


async def run(command: Command, settings: Settings, by: ReplyBy) -> Any:
    """Connect and run a validated command, answered by `by`."""
    client: StoreReader
    if command.needs_temporal:
        # Only a command that needs Temporal loads its client: a read answers from the store alone, and fast (R43).
        from observability import tracing
        from starter.client import HelperClient

        # Tracing only when configured (observability/tracing.py): opentelemetry is imported only then.
        traced = tracing.install(settings.tracing_enabled, settings.tracing_name("helper-starter"))
        try:
            return await _run_and_close(await HelperClient.connect(settings, by=by), command, by)
        finally:
            if traced:
                tracing.shutdown()  # bounded (FLUSH_TIMEOUT_MS); the answer is ready, nothing else runs
    else:
        client = await StoreReader.open(settings)
    return await _run_and_close(client, command, by)


async def _run_and_close(client: StoreReader, command: Command, by: ReplyBy) -> Any:
    try:
        return await command.run(client, by)
    finally:
        await client.aclose()


def run_command(command: Command, settings: Settings, by: ReplyBy) -> Any:
    """Run a validated command. A read of a SQLite store runs on the stdlib driver without an event loop: asyncio
    (and the ssl it loads) alone costs about twice a bare interpreter's start (R43)."""
    if not command.needs_temporal and not command.streams:
        reader = open_sqlite_reader(settings)
        if reader is not None:
            return _finish_without_loop(_run_and_close(StoreReader(settings, reader), command, by))
    import asyncio

    return asyncio.run(run(command, settings, by))


T = TypeVar("T")


def _finish_without_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends (`store.reads.open_sqlite`'s reads never do)."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("a SQLite read suspended: it needs an event loop")


def _settings() -> Settings:
    try:
        # From the checkout, the local stack's settings file (data/local.env) fills in what the environment lacks.
        return Settings.from_env(local_file=True)
    except SettingsError as error:
        raise InvalidConfiguration(f"the starter's configuration is invalid: {error}") from None


def _write(stream: Any, text: str) -> bool:
    """Write and flush; False when the reader went away (`| head -1`): nothing is left to tell it, and no
    traceback either (the stream is pointed at /dev/null so nothing later fails on it)."""
    try:
        # bytes, so a lone surrogate from a non-UTF-8 argument cannot fail the write
        stream.buffer.write(text.encode("utf-8", "backslashreplace"))
        stream.flush()
    except (BrokenPipeError, ValueError):
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        return False
    return True


def _print_line(line: str) -> None:
    if not _write(sys.stdout, line + "\n"):
        os._exit(0)  # a watch whose reader is gone ends, as with Ctrl-C


def main(argv: list[str] | None = None) -> None:
    arguments_given = list(sys.argv[1:] if argv is None else argv)
    inputs: list[str] = list(arguments_given)
    error: StarterError | None = None
    output: Any = None
    watching = False  # `watch` prints human lines and `serve` logs, so only their errors are JSON
    try:
        arguments = build_parser().parse_args(arguments_given)
        watching = arguments.command in ("watch", "serve")
        settings = _settings()
        if arguments.command == "serve":
            from starter.service.server import serve

            serve(settings, arguments.bind)
        else:
            by = reply_by(settings)  # the write's bound counts from here, connecting included (R48)
            output = result_json(run_command(prepare(arguments, settings), settings, by))
    except StarterError as refused:
        error = refused
    except (Exception, KeyboardInterrupt) as unexpected:  # never a traceback: one JSON object and the exit code (R42)
        if not (watching and isinstance(unexpected, KeyboardInterrupt)):  # Ctrl-C is how a watch ends: exit 0
            detail = safe_text(f"{type(unexpected).__name__}: {unexpected}", inputs)
            _write(sys.stderr, f"helper-starter: unexpected {detail}"[:STDERR_MAX_CHARS] + "\n")
            error = Unavailable(
                f"the starter failed unexpectedly ({type(unexpected).__name__}); it is safe to ask again"
            )
    code = 0
    if error is not None:
        output, code = error_json(error, inputs), error.exit_code
        body = next(iter(output.values()))
        line = f"helper-starter: {body['code']}: {body['message']}".replace("\n", " ")
        _write(sys.stderr, clip(line, STDERR_MAX_CHARS) + "\n")
    if error is not None or not watching:
        _write(sys.stdout, json.dumps(output, ensure_ascii=False, indent=2) + "\n")
    # sdk-python#300: skip interpreter teardown so a finished command never exits with a crash code.
    os._exit(code)


def _wait(arguments: argparse.Namespace) -> dict[str, Any] | None:
    """`--remind-after-ms` and `--expire-after-ms` as the request's `wait`; the request's checks name a bad value."""
    wait: dict[str, Any] = {}
    if arguments.remind_after_ms is not None:
        wait["remind_after_ms"] = [part.strip() for part in arguments.remind_after_ms.split(",") if part.strip()]
    if arguments.expire_after_ms is not None:
        wait["expire_after_ms"] = arguments.expire_after_ms
    return wait or None
