"""The starter's command line: every command, its arguments and its help (exit codes, the environment it
reads, where model names come from). Parsing errors raise InvalidRequest, so they too become one JSON object
and exit 2 (R42)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from config import help as help_text
from config.local_env import CONNECTION_VARIABLES, DEFAULT_FILE, ENV_FILE_VARIABLE
from config.settings import tree_variables, variable
from domain.ids import GOAL_ID_RULE, ID_RULE
from domain.limits import LimitOverrides
from domain.rows import RowState
from protocol.errors import InvalidRequest
from starter import inputs as goals

EXIT_CODES = f"""\
Answers: one JSON object on stdout; an error is {{"error": {{"code": ..., "message": ...}}}} plus one line on stderr.
Exit codes:
  0  done
  1  refused: a limit, an unknown helper or Goal (error.code says which)
  2  invalid: the request or the command line (error.code "invalid_request"), or the starter's own
     configuration, a bad HELPER_* or TEMPORAL_* variable (error.code "invalid_configuration"):
     asking again unchanged will not help
  3  unavailable: the store or Temporal did not answer or accept the write in time; nothing was taken,
     asking again is safe. Also when there is no store where {variable("store")} points (a read
     creates none): the message names the store's address and how to point at the right one
  4  accepted: Temporal accepted the write, which will be carried out, but its answer did not come in
     time: {{"pending": {{"code": "accepted", ...}}}}; look with show or watch, or ask again
  5  busy: refused before anything was sent, the runtime has more writes than it can answer in time;
     ask again after error.retry_after_s seconds
A write is answered within {variable("starter_timeout_ms")}, whatever the load.
Input is checked before anything is connected to: exit 2 does not depend on the runtime being up."""

# The settings each kind of command reads, by their fields in the settings tree (config.settings), whose variables
# and defaults the help lists (every variable: docs/configuration.md).
READ_SETTINGS = ("store", "results_dir")
WRITE_SETTINGS = (
    *READ_SETTINGS,
    "temporal_address",
    "temporal_namespace",
    "task_queue",
    "codec_keys",
    "codec_key_id",
    "codec_allow_plaintext",
    "codec_required",
    "starter_timeout_ms",
    "starter_max_in_flight",
    "starter_accept_by",
    "tracing",
    "otlp_endpoint",
    "otlp_traces_endpoint",
    "otel_service_name",
)
# `start` and `goal add` check the model against the core's catalog, and a helper's limits against the policy's.
REQUEST_SETTINGS = (*WRITE_SETTINGS, "core_url", "core_proxy", "policy")
ENV_FILE = (
    f"{ENV_FILE_VARIABLE} names a settings file that fills in what the environment lacks; unset, "
    f"./{DEFAULT_FILE} is read when it is there and none of {', '.join(CONNECTION_VARIABLES)} is set."
)
ENV_READ = help_text.environment(tree_variables(only=READ_SETTINGS), notes=[f"Reads need nothing else. {ENV_FILE}"])
ENV_WRITE = help_text.environment(tree_variables(only=WRITE_SETTINGS), temporal_client=True, notes=[ENV_FILE])
ENV_REQUEST = help_text.environment(
    tree_variables(only=REQUEST_SETTINGS),
    temporal_client=True,
    notes=[ENV_FILE, "--deadline-ms and the other limit flags only tighten the configured limits."],
)
ENV_SERVE = help_text.environment(
    tree_variables(only=(*REQUEST_SETTINGS, "service")), temporal_client=True, notes=[ENV_FILE]
)
ENV_ANY = help_text.environment(
    tree_variables(only=(*REQUEST_SETTINGS, "service")),
    title="Environment of all the commands; COMMAND --help names those it reads",
    temporal_client=True,
    notes=[ENV_FILE],
)
MODELS = """\
Models: --model names a model of the core's catalog. The local reference core offers "scripted" (follows
a helper-script block in the task: tests and the demo) and, when an OpenAI-compatible API is configured,
"openai:<model>" for each configured model (docs/reference-core.md). The starter asks the core's catalog
(GET /v1/models at HELPER_CORE_URL) and refuses any other name with exit 2, listing those offered."""
ENV_WATCH = f"""{ENV_READ}

Output: human lines, not JSON ("HH:MM:SS  owner/helper  what changed"), each at the time it happened and in
that order across helpers, polled about every 0.5 s from the store only (Temporal may be down), until Ctrl-C
(exit 0); a watch of one helper (--id) ends by itself, exit 0, once the helper has its outcome. An error is still
one JSON object and its code."""


def _epilog(*sections: str) -> str:
    return "\n\n".join([*sections, EXIT_CODES])


class _Parser(argparse.ArgumentParser):
    """argparse that raises InvalidRequest instead of printing usage text and exiting (R42)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("epilog", EXIT_CODES)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise InvalidRequest(f"{message} (see {self.prog} --help)", {"problems": [message]})


BOUNDARY_HELP = (
    "what the owner allowed: 'send_mail to <address>[, <address>...]' or "
    "'create_event with <address>[, ...]' (repeatable)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="helper-starter", description="Start and manage Iva's helpers.", epilog=_epilog(ENV_ANY))
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_helper_commands(commands)
    _add_answer_commands(commands)
    _add_chat_commands(commands)
    _add_watch_and_serve(commands)
    _add_goal_commands(commands)
    return parser


Commands = Any  # argparse's subparsers action: its type is private


def _add_helper_commands(commands: Commands) -> None:
    """An owner's helpers: start, list, show, close."""
    start = commands.add_parser(
        "start",
        help="admit a helper (answers at once: running, or waiting and how many ahead)",
        description="Admit a helper; asking again with the same --id is harmless.",
        epilog=_epilog(ENV_REQUEST, MODELS),
    )
    _owner(start)
    _helper_id(start)
    task = start.add_mutually_exclusive_group(required=True)
    task.add_argument("--task", help="the task text (1-20,000 characters)")
    task.add_argument("--task-file", type=Path, help="read the task (UTF-8) from this file; '-' for stdin")
    _request_options(start)
    start.add_argument("--goal", dest="goal_id", help="the Goal this check belongs to")
    start.add_argument(
        "--follow-up",
        dest="follow_up",
        metavar="HELPER_ID",
        help="continue this earlier helper's question, authorization wait or partial outcome: the task is the "
        "owner's answer, and the earlier work's context is carried on (its outcome is then delivered)",
    )
    for name in (field.replace("_", "-") for field in LimitOverrides.model_fields):
        start.add_argument(
            f"--{name}", type=int, metavar="N", help="a tighter limit for this helper (at most the configured one)"
        )
    start.add_argument(
        "--remind-after-ms",
        metavar="N[,N...]",
        help="remind the chat of this helper's question or authorization wait this long after its delivery (at most "
        "5, comma-separated; default HELPER_WAIT_REMIND_MS)",
    )
    start.add_argument(
        "--expire-after-ms",
        type=int,
        metavar="N",
        help="end the wait `expired` this long after its delivery (at most HELPER_KEEP_MS; default "
        "HELPER_WAIT_EXPIRE_MS)",
    )

    listing = commands.add_parser(
        "list",
        help="the owner's helper rows, from the store",
        description="The owner's helper rows, read from the store (works while Temporal is down).",
        epilog=_epilog(ENV_READ),
    )
    _owner(listing)
    listing.add_argument(
        "--state", action="append", choices=[s.value for s in RowState], help="only rows in this state (repeatable)"
    )

    show = commands.add_parser(
        "show",
        help="one helper with its full outcome text",
        description="One helper's row and its full outcome text, from the store.",
        epilog=_epilog(ENV_READ),
    )
    _owner(show)
    _helper_id(show)

    close = commands.add_parser(
        "close",
        help="close a helper (running, ready or delivered)",
        description="Close a helper. A running one keeps its slot until the core confirms the stop.",
        epilog=_epilog(ENV_WRITE),
    )
    _owner(close)
    _helper_id(close)


def _add_answer_commands(commands: Commands) -> None:
    """The owner's answers to the helpers' questions and authorization waits: answer, answers."""
    answer = commands.add_parser(
        "answer",
        help="answer a helper's question or authorization wait, once (the first answer is the one)",
        description="Answer a helper's question with an option it offered or, where it takes them, your own "
        "words; answer an authorization wait with the option grant or deny. A grant may name, as --text, the "
        "action granted: the one asked or fewer of its recipients, never more or another tool. The first answer "
        "is the only one: "
        "asking again, with it or another, returns that first answer and starts nothing. Every answer but deny "
        "starts the helper <id>.answer, which goes on from the answer.",
        epilog=_epilog(ENV_WRITE),
    )
    _owner(answer)
    _helper_id(answer)
    answer.add_argument(
        "--question",
        required=True,
        dest="question_id",
        help="the question's id, as the outcome shows it ('question' for a plain-text question, 'authorization' "
        "for an authorization wait)",
    )
    answer.add_argument("--option", dest="option_id", help="the id of an option the question offered (or grant, deny)")
    answer.add_argument(
        "--text",
        help="an answer in your own words (1-4,000 characters), where the question takes one; with --option grant, "
        "the action granted (for example 'send_mail to anna@example.com')",
    )
    answer.add_argument("--by", help="who answered, as you say it (for example owner); kept in the wait's record")
    answer.add_argument("--via", help="through which channel (for example telegram); kept in the wait's record")

    answers = commands.add_parser(
        "answers",
        help="several answers at once, each judged alone as answer judges it (at most 20)",
        description='Several answers of the owner\'s in one call, from JSON: {"answers": [{"helper_id": "pick-room", '
        '"question_id": "room", "option_id": "hall", "by": "owner", "via": "telegram"}, ...]} (at most 20, each '
        "with answer's fields). Each is judged alone, exactly as answer judges it, in the order given, and gets its "
        "own result or error; one refused changes nothing of another. An invalid one makes the whole call invalid, "
        "and nothing is sent.",
        epilog=_epilog(ENV_WRITE),
    )
    _owner(answers)
    answers.add_argument(
        "--file", type=Path, default=Path("-"), help="the JSON, from this file; '-' (the default) for stdin"
    )


def _add_chat_commands(commands: Commands) -> None:
    """What a chat turn reads and reports: unreported, read, delivered; the chat turning idle; the owner's usage."""
    unreported = commands.add_parser(
        "unreported",
        help="finalized outcomes not yet delivered, with summaries",
        description="Finalized outcomes not yet delivered, with their summaries, from the store.",
        epilog=_epilog(ENV_READ),
    )
    _owner(unreported)

    waits = commands.add_parser(
        "waits",
        help="every wait of the owner's that still takes an answer, across helpers",
        description="Every question and authorization wait of the owner's that still takes an answer, across "
        "helpers, from the store: what it asks, when it was asked and delivered, the reminders sent, when it "
        "expires. Answer each with `answer`.",
        epilog=_epilog(ENV_READ),
    )
    _owner(waits)

    audit = commands.add_parser(
        "audit",
        help="the records of the owner's waits that ended, newest first",
        description="The record of each wait of the owner's that ended (answered, granted, denied, expired, closed, "
        "followed up, removed): what was shown and its SHA-256 digest, who answered and through what, what was "
        "asked and what answered or granted, when. Kept HELPER_AUDIT_KEEP_MS after the end. A page at a time: "
        "give --before the `next` of the page before.",
        epilog=_epilog(ENV_READ),
    )
    _owner(audit)
    audit.add_argument("--id", dest="helper_id", help=f"only this helper's records: {ID_RULE}")
    audit.add_argument("--before", help="the `next` token of the page before")
    audit.add_argument("--limit", type=int, default=50, help="records in a page (1-200, default 50)")

    read = commands.add_parser(
        "read",
        help="record that a chat turn read these outcomes",
        description="Record that a chat turn read these outcomes (before it answers).",
        epilog=_epilog(ENV_WRITE),
    )
    _owner(read)
    _turn(read)
    read.add_argument("helper_ids", nargs="+", metavar="HELPER_ID", help="the helpers whose outcomes the turn read")

    delivered = commands.add_parser(
        "delivered",
        help="the turn answered (nonempty) and completed: mark what it read",
        description="The turn answered (nonempty) and completed: mark the outcomes it read as delivered.",
        epilog=_epilog(ENV_WRITE),
    )
    _owner(delivered)
    _turn(delivered)
    delivered.add_argument(
        "--answer-chars", type=int, required=True, metavar="N", help="length of the answer the turn sent (> 0)"
    )
    idle = commands.add_parser(
        "idle",
        help="the owner's chat turned idle: offer a waiting system event now",
        description="The owner's chat turned idle (a turn ended, or the chat answers again after being down): a "
        "system event waiting for it is offered within seconds, not after the runtime's backoff. Costs nothing "
        "when no event waits.",
        epilog=_epilog(ENV_WRITE),
    )
    _owner(idle)
    usage = commands.add_parser(
        "usage",
        help="usage per helper and per model (kept after rows expire)",
        description="Steps and tokens per helper and per model, from the store (kept after rows expire).",
        epilog=_epilog(ENV_READ),
    )
    _owner(usage)


def _add_watch_and_serve(commands: Commands) -> None:
    """Live lines on a terminal, and every command over HTTP."""
    watching = commands.add_parser(
        "watch",
        help="live lines for the owner's helpers until Ctrl-C, or for one until it has its outcome",
        description="Print a line whenever one of the owner's helpers changes: admitted, running with its "
        "steps, waiting for a slot, its outcome, delivered or closed.",
        epilog=_epilog(ENV_WATCH),
    )
    _owner(watching)
    watching.add_argument(
        "--id",
        dest="helper_id",
        help=f"only this helper, until it has its outcome: {ID_RULE} (default: every helper of the owner)",
    )
    watching.add_argument(
        "--once",
        action="store_true",
        help="print the current lines in the order they happened and exit (an unknown --id: exit 1)",
    )

    serve = commands.add_parser(
        "serve",
        help="serve every command over HTTP/JSON until SIGTERM or Ctrl-C (docs/api.md)",
        description="Serve every command over HTTP/JSON, with live lines as Server-Sent Events (docs/api.md). "
        "Refuses to listen beyond this machine without HELPER_API_TOKEN.",
        epilog=_epilog(ENV_SERVE),
    )
    serve.add_argument(
        "--bind", metavar="HOST:PORT", help="where to listen (default HELPER_API_BIND or 127.0.0.1:8340)"
    )


def _add_goal_commands(commands: Commands) -> None:
    """Goals: checks that run as helpers on a Temporal Schedule."""
    goal = commands.add_parser(
        "goal",
        help="Goals: checks that run as helpers on a Temporal Schedule",
        description="Goals: checks that run as helpers on a Temporal Schedule.",
        epilog=_epilog(ENV_WRITE),
    )
    goal_commands = goal.add_subparsers(dest="goal_command", required=True, metavar="GOAL_COMMAND")
    add = goal_commands.add_parser("add", help="create a Goal and its Schedule", epilog=_epilog(ENV_REQUEST, MODELS))
    _owner(add)
    _goal_id(add)
    add.add_argument(
        "--every", required=True, help=f"how often a check runs: 30m, 1h, 1d (1 minute to {goals.MAX_EVERY.days} days)"
    )
    add.add_argument("--task", required=True, help="the task each check runs (1-20,000 characters)")
    _request_options(add)
    goal_list = goal_commands.add_parser(
        "list", help="the owner's Goals, each with its next runs (none while paused)", epilog=_epilog(ENV_WRITE)
    )
    _owner(goal_list)
    for name, text in (
        ("pause", "stop the checks for now (the Goal lists no next runs until resumed)"),
        ("resume", "start the checks again"),
        ("run", "run one check now"),
        ("remove", "remove the Goal and its Schedule"),
    ):
        one = goal_commands.add_parser(
            name, help=text, description=text[0].upper() + text[1:] + ".", epilog=_epilog(ENV_WRITE)
        )
        _owner(one)
        _goal_id(one)


def _owner(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--owner", required=True, help="the owner's id (from the authenticated chat session)")


def _helper_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--id", required=True, dest="helper_id", help=f"the helper's id: {ID_RULE}")


def _goal_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--goal", required=True, dest="goal_id", help=f"the Goal's id: {GOAL_ID_RULE}")


def _turn(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turn", required=True, help="the chat turn's id (1-200 characters)")


def _request_options(parser: argparse.ArgumentParser) -> None:
    """What a helper's request carries besides its task, the same for `start` and `goal add`."""
    parser.add_argument("--boundary", action="append", default=[], help=BOUNDARY_HELP)
    parser.add_argument("--language", default="en", help="the owner's language: en or ru (default en)")
    parser.add_argument(
        "--model", required=True, help="the owner's selected model, a name from the core's catalog (see Models)"
    )
