"""The core's tools, their authority, and how one tool call is carried out on the fake world (R33).

Read tools (search_notes, read_mail) return data wrapped as untrusted. draft_mail is reversible and
always allowed. send_mail and create_event are irreversible: they run only when the task's boundary
authorizes them, otherwise the call is refused and the refusal is recorded for the outcome. Two
control tools (ask_owner, request_authorization) pause the session; the engine handles them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from domain.core_api import Action
from reference_core.instructions import wrap_untrusted
from reference_core.model import ToolCall, ToolSpec
from reference_core.texts import text
from reference_core.world import Event, Mail, OwnerWorld

ASK_OWNER = "ask_owner"
REQUEST_AUTHORIZATION = "request_authorization"


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchNotesArgs(_Arguments):
    query: str = Field(default="", description="Words to look for; empty lists all notes.")


class ReadMailArgs(_Arguments):
    query: str = Field(default="", description="Words to look for in sender, subject or body.")


class MailArgs(_Arguments):
    to: str = Field(min_length=1)
    subject: str = Field(min_length=1)
    body: str = ""


class CreateEventArgs(_Arguments):
    title: str = Field(min_length=1)
    when: str = Field(min_length=1, description="Date and time, e.g. 2026-11-03 10:00.")
    attendees: list[str] = Field(default_factory=list)


class AskOwnerArgs(_Arguments):
    question: str = Field(min_length=1)


class RequestAuthorizationArgs(_Arguments):
    action: str = Field(min_length=1, description="The action that needs the owner's authorization.")
    reason: str = ""


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    description: str
    arguments: type[_Arguments]
    irreversible: bool = False

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.arguments.model_json_schema())


WORLD_TOOLS: dict[str, ToolDefinition] = {
    tool.name: tool
    for tool in (
        ToolDefinition("search_notes", "Search the owner's notes.", SearchNotesArgs),
        ToolDefinition("read_mail", "Read the owner's inbox.", ReadMailArgs),
        ToolDefinition("draft_mail", "Save a mail draft for the owner (reversible).", MailArgs),
        ToolDefinition("send_mail", "Send a mail (irreversible).", MailArgs, irreversible=True),
        ToolDefinition("create_event", "Create a calendar event (irreversible).", CreateEventArgs, irreversible=True),
    )
}

CONTROL_TOOLS: dict[str, ToolDefinition] = {
    tool.name: tool
    for tool in (
        ToolDefinition(ASK_OWNER, "Pause and return a question for the owner in the outcome.", AskOwnerArgs),
        ToolDefinition(
            REQUEST_AUTHORIZATION,
            "Pause because an action needs authorization the boundary does not give.",
            RequestAuthorizationArgs,
        ),
    )
}

ALL_TOOLS: dict[str, ToolDefinition] = {**WORLD_TOOLS, **CONTROL_TOOLS}

TOOL_SPECS: tuple[ToolSpec, ...] = tuple(tool.spec for tool in ALL_TOOLS.values())


def normalized_boundary_item(item: str) -> str:
    return item.strip().lower().replace(" ", "_").replace("-", "_")


def authorizes(boundary: Sequence[str], tool_name: str) -> bool:
    """A boundary item authorizes a tool when, normalized, it starts with the tool's name.

    "send_mail", "Send mail to bob@example.com" and "send-mail" all authorize send_mail.
    """
    return any(normalized_boundary_item(item).startswith(tool_name) for item in boundary)


@dataclass(frozen=True)
class ToolOutcome:
    content: str  # what the model sees as the tool result
    action: Action | None = None  # set when the tool did something on the owner's behalf
    refusal: str | None = None  # set when authority refused the call


def parse_arguments(call: ToolCall) -> _Arguments:
    """The call's arguments as the tool's model; raises ValueError naming what is wrong."""
    definition = ALL_TOOLS.get(call.name)
    if definition is None:
        raise ValueError(f"unknown tool {call.name!r}; known tools: {', '.join(ALL_TOOLS)}")
    if call.arguments_error is not None:
        raise ValueError(f"bad arguments for {call.name}: {call.arguments_error}")
    try:
        return definition.arguments.model_validate(call.arguments)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'arguments'}: {problem['msg']}"
            for problem in error.errors()
        )
        raise ValueError(f"bad arguments for {call.name}: {problems}") from None


def _refusal_target(arguments: _Arguments) -> str:
    if isinstance(arguments, MailArgs):
        return arguments.to
    if isinstance(arguments, CreateEventArgs):
        return arguments.title
    return ""


def _matches(query: str, *fields: str) -> bool:
    words = query.lower().split()
    haystack = " ".join(fields).lower()
    return all(word in haystack for word in words)


def run_world_tool(call: ToolCall, *, world: OwnerWorld, boundary: Sequence[str], language: str) -> ToolOutcome:
    """Carry out one world tool call: check its arguments and authority, then act on the world."""
    try:
        arguments = parse_arguments(call)
    except ValueError as error:
        return ToolOutcome(content=f"error: {error}")
    definition = WORLD_TOOLS[call.name]
    if definition.irreversible and not authorizes(boundary, call.name):
        refusal = text("refusal.outside_boundary", language, tool=call.name, target=_refusal_target(arguments))
        return ToolOutcome(
            content=(
                f"refused: {call.name} is irreversible and the task's boundary does not authorize it. "
                "Prepare a draft instead and name the authorization needed in the outcome."
            ),
            refusal=refusal,
        )
    now = datetime.now(UTC)
    match arguments:
        case SearchNotesArgs(query=query):
            found = [note for note in world.notes if _matches(query, note.title, note.body)]
            listing = "\n".join(f"- {note.title}: {note.body}" for note in found) or "(no notes found)"
            return ToolOutcome(content=wrap_untrusted("notes", listing))
        case ReadMailArgs(query=query):
            mails = [mail for mail in world.inbox if _matches(query, mail.sender, mail.subject, mail.body)]
            listing = "\n\n".join(f"From: {mail.sender}\nSubject: {mail.subject}\n\n{mail.body}" for mail in mails)
            return ToolOutcome(content=wrap_untrusted("mail", listing or "(no mail found)"))
        case MailArgs(to=to, subject=subject, body=body):
            mail = Mail(sender="owner", to=to, subject=subject, body=body)
            if call.name == "draft_mail":
                world.drafts.append(mail)
                what, done = text("action.draft_mail", language, subject=subject), "draft saved"
            else:
                world.sent.append(mail)
                what, done = text("action.send_mail", language, subject=subject), "mail sent"
            return ToolOutcome(content=f"{done} (to {to})", action=Action(tool=call.name, whom=to, what=what, at=now))
        case CreateEventArgs(title=title, when=when, attendees=attendees):
            world.events.append(Event(title=title, when=when, attendees=tuple(attendees)))
            whom = ", ".join(attendees) or text("action.whom_owner", language)
            what = text("action.create_event", language, title=title, when=when)
            return ToolOutcome(
                content=f"event created: {title} at {when}",
                action=Action(tool=call.name, whom=whom, what=what, at=now),
            )
    return ToolOutcome(content=f"error: {call.name} cannot be run here")
