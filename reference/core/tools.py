"""The core's tools, their authority, and how one tool call is carried out on the fake world (R33, R41).

Read tools (search_notes, read_mail) return data wrapped as untrusted. draft_mail is reversible and
always allowed. send_mail and create_event are irreversible: they run only when the task's boundary
names the tool and every address the call touches (the mail's recipients, the event's attendees), in
the grammar of `domain.boundary`, or when a grant of the session names exactly that action and was not
used yet (R55); otherwise the call is refused and the refusal is recorded for the outcome. A boundary
item that does not parse (a negation, a bare tool name) authorizes nothing. Two control tools
(ask_owner, request_authorization) pause the session; the engine handles them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contracts.core_api import MAX_QUESTION_OPTIONS, Action, ChoiceId, Grant, QuestionChoices, QuestionOption
from domain.boundary import TOOL_KEYWORDS, BoundaryItem, action_digest, address_list, outside, readable_items
from reference.core.instructions import wrap_untrusted
from reference.core.model import ToolCall, ToolSpec
from reference.core.texts import text
from reference.core.world import Event, Mail, OwnerWorld

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
    options: list[QuestionOption] = Field(
        default_factory=list,
        max_length=MAX_QUESTION_OPTIONS,
        description="Choices the owner may pick from, each an id and a short label; none for a plain question.",
    )
    free_text: bool = Field(default=False, description="With options: the owner may also answer in words.")
    question_id: ChoiceId | None = Field(
        default=None, description="Names the question in the owner's answer; the core makes one when absent."
    )

    @model_validator(mode="after")
    def _answerable(self) -> AskOwnerArgs:
        self.choices("check")  # the contract's rules for choices, so a bad call is refused to the model
        return self

    def choices(self, made_up_id: str) -> QuestionChoices | None:
        """The structured question this call asks, with `made_up_id` when the model named none; None for a plain
        question (no options, no free-text rule, no id)."""
        if not self.options and not self.free_text and self.question_id is None:
            return None
        return QuestionChoices(
            question_id=self.question_id or made_up_id, options=self.options, free_text=self.free_text
        )


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
        ToolDefinition(
            ASK_OWNER,
            "Pause and return a question for the owner in the outcome, with choices to pick from if there are some.",
            AskOwnerArgs,
        ),
        ToolDefinition(
            REQUEST_AUTHORIZATION,
            "Pause because an action needs authorization the boundary does not give.",
            RequestAuthorizationArgs,
        ),
    )
}

ALL_TOOLS: dict[str, ToolDefinition] = {**WORLD_TOOLS, **CONTROL_TOOLS}

TOOL_SPECS: tuple[ToolSpec, ...] = tuple(tool.spec for tool in ALL_TOOLS.values())


def touched(arguments: _Arguments) -> tuple[str, ...] | None:
    """The addresses an irreversible call touches, or None when its recipient is not a list of addresses."""
    if isinstance(arguments, MailArgs):
        return address_list(arguments.to)
    if isinstance(arguments, CreateEventArgs):
        attendees = tuple(attendee.strip().lower() for attendee in arguments.attendees)
        return attendees if all(address_list(attendee) == (attendee,) for attendee in attendees) else None
    return ()


def refused_targets(boundary: Sequence[BoundaryItem], tool_name: str, arguments: _Arguments) -> tuple[str, ...] | None:
    """Why the boundary refuses this irreversible call: the targets outside it (`()` = allowed); None when the
    boundary does not name the tool or the call's targets are not addresses (R41)."""
    targets = touched(arguments)
    if targets is None:
        return None
    return outside(boundary, tool_name, targets)


def authorizes(boundary: Sequence[str], tool_name: str, targets: Sequence[str]) -> bool:
    """Whether the boundary (the wire strings) lets `tool_name` touch every one of `targets` (R41).

    Items that do not parse authorize nothing; a tool with no item authorizes nothing; every target must
    be listed by an item of that tool (case-insensitively).
    """
    items, _ = readable_items(boundary)
    return outside(items, tool_name, [target.strip().lower() for target in targets]) == ()


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
        return "; ".join((arguments.title, *arguments.attendees))
    return ""


def _matches(query: str, *fields: str) -> bool:
    words = query.lower().split()
    haystack = " ".join(fields).lower()
    return all(word in haystack for word in words)


# Marks a grant used, durably, before its action runs; False when it was used already (R55).
GrantUse = Callable[[str], bool]


def run_world_tool(
    call: ToolCall,
    *,
    world: OwnerWorld,
    boundary: Sequence[str],
    language: str,
    grants: Sequence[Grant] = (),
    use_grant: GrantUse | None = None,
) -> ToolOutcome:
    """Carry out one world tool call: check its arguments and authority, then act on the world. An irreversible call
    outside the boundary runs under a grant of exactly its action (tool and set of targets), once (R55)."""
    try:
        arguments = parse_arguments(call)
    except ValueError as error:
        return ToolOutcome(content=f"error: {error}")
    definition = WORLD_TOOLS[call.name]
    if definition.irreversible:
        items, _ = readable_items(boundary)
        outside_targets = refused_targets(items, call.name, arguments)
        if outside_targets != ():
            grant = granting(grants, call.name, arguments)
            if grant is None:
                return _refused(call.name, arguments, outside_targets, language)
            if use_grant is None or not use_grant(grant.id):
                return _grant_used(call.name, arguments, language)
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


def granting(grants: Sequence[Grant], tool: str, arguments: _Arguments) -> Grant | None:
    """The grant whose action is exactly this call's: its tool and the set of targets it touches (R55)."""
    targets = touched(arguments)
    if targets is None or not targets:
        return None
    digest = action_digest(BoundaryItem(tool=tool, targets=tuple(dict.fromkeys(targets))))
    return next((grant for grant in grants if grant.digest == digest), None)


def _grant_used(tool: str, arguments: _Arguments, language: str) -> ToolOutcome:
    return ToolOutcome(
        content=(
            f"refused: the owner granted {tool} to these recipients once, and it was done already (grant_used). "
            "Do not try again: say in the outcome that it was done."
        ),
        refusal=text("refusal.grant_used", language, tool=tool, target=_refusal_target(arguments)),
    )


def _refused(tool: str, arguments: _Arguments, outside_targets: tuple[str, ...] | None, language: str) -> ToolOutcome:
    """The refusal of an irreversible call the boundary does not authorize, for the model and the outcome."""
    refusal = text("refusal.outside_boundary", language, tool=tool, target=_refusal_target(arguments))
    if outside_targets:
        why = f"the task's boundary does not authorize {tool} for {', '.join(outside_targets)}"
    elif outside_targets is None and touched(arguments) is None:
        why = f"{tool} may only touch plain e-mail addresses that the task's boundary names"
    else:
        why = f"the task's boundary does not authorize {tool}"
    return ToolOutcome(
        content=(
            f"refused: {tool} is irreversible and {why}. Do not try another address: prepare a draft instead "
            "and name the authorization needed in the outcome."
        ),
        refusal=refusal,
    )


# The tools a boundary can name are exactly the irreversible ones (domain.boundary's grammar).
if set(TOOL_KEYWORDS) != {name for name, tool in WORLD_TOOLS.items() if tool.irreversible}:
    raise RuntimeError("domain.boundary.TOOL_KEYWORDS must name exactly the irreversible tools")
