"""The `helper-script` block that tells the scripted model how to behave, and a builder for it.

A task may contain one fenced block:

    ```helper-script
    {"steps": 4, "step_ms": 50, "end": "question"}
    ```

Every field is optional (see `Script`). `scripted_task("Find a date", steps=4, end="question")` appends
such a block, so tests and the demo never hand-write JSON. A bad block is refused at create (400).

A task without a block gets the defaults, and, when it asks for a mail, the mail (`plain_task_script`): so the
README's "Find the Q3 report and mail it to Bob" with `send_mail to bob@example.com` sends what it says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from contracts.core_api import MAX_QUESTION_OPTIONS, QuestionOption
from domain.boundary import readable_items
from reference.core.latches import DEFAULT_HOLD_TIMEOUT_MS, LATCH_NAME, LATCH_NAME_RULE, LatchHolds
from reference.core.model import ToolCall
from reference.core.texts import text
from reference.core.tools import ASK_OWNER, WORLD_TOOLS, parse_arguments

BLOCK_LANGUAGE = "helper-script"
_BLOCK = re.compile(r"```" + BLOCK_LANGUAGE + r"[ \t]*\n(.*?)```", re.DOTALL)
TITLE_MAX_CHARS = 80


class ScriptError(ValueError):
    """A helper-script block is malformed; `field` names the offending field ("script" if none)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class ScriptEnd(StrEnum):
    COMPLETE = "complete"  # the last of `steps` calls answers with the final text
    QUESTION = "question"  # the last call asks the owner; the session pauses
    AUTHORIZATION = "authorization"  # the last call asks for authorization; the session pauses
    FAIL = "fail"  # after `steps` calls the next call fails
    RUN = "run"  # keep calling until a ceiling, finish-now or cancel
    HANG = "hang"  # after `steps` calls go silent: ignore finish-now, never confirm a cancel


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int = Field(ge=1, description="The call (1-based) that makes this tool call.")
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_tool_with_good_arguments(self) -> Self:
        if self.tool not in WORLD_TOOLS:
            raise ValueError(f"unknown tool {self.tool!r}; use one of {', '.join(WORLD_TOOLS)}")
        parse_arguments(ToolCall(call_id="check", name=self.tool, arguments=self.args))
        return self


class Script(BaseModel):
    """How the scripted model behaves for one task. Defaults: three 300 ms calls, then complete."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # `end` comes first because the checks of `steps` and `tool_calls` depend on it.
    end: ScriptEnd = ScriptEnd.COMPLETE
    steps: int = Field(default=3, ge=0, le=10_000, description="Model calls the snapshot shows at the end.")
    step_ms: int = Field(default=300, ge=0, le=600_000, description="Real milliseconds per call.")
    input_tokens: int = Field(default=2000, ge=0, le=100_000_000, description="Prompt size of call 1.")
    input_growth: int = Field(default=1500, ge=0, le=100_000_000, description="Prompt growth per call.")
    cached_ratio: float = Field(default=0.5, ge=0.0, le=1.0, description="Cached share of each prompt.")
    output_tokens: int = Field(default=300, ge=0, le=1_000_000, description="Output tokens per call.")
    compact_at: list[int] = Field(default_factory=list, description="Calls before which the context compacts.")
    compact_to_tokens: int | None = Field(
        default=None, ge=0, le=100_000_000, description="Prompt after compaction; default 30% of the previous."
    )
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    question: str | None = Field(default=None, min_length=1, max_length=2000)
    # A structured question (end "question" only): its options as id/label pairs, whether free text is taken,
    # and its id (the core makes one when absent). The contract's rules apply (`contracts.core_api`).
    options: list[QuestionOption] = Field(
        default_factory=list, max_length=MAX_QUESTION_OPTIONS, description="The question's choices, [id, label]."
    )
    free_text: bool = Field(default=False, description="With options: the owner may also answer in words.")
    question_id: str | None = Field(default=None, description="The structured question's id.")
    authorization: str | None = Field(default=None, min_length=1, max_length=2000)
    error: str = Field(default="the scripted model failed", min_length=1, max_length=2000)
    final_text: str | None = Field(default=None, min_length=1, max_length=20_000)
    recall: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="A phrase the model looks up in what the conversation learned before this task and quotes.",
    )
    follow_up: Script | None = Field(
        default=None,
        description="What the model does in a follow-up of this session (continue_from) whose own task has no script: "
        "the owner's answer is written by the runtime, so a test scripts the follow-up here.",
    )
    cancel_delay_ms: int = Field(default=0, ge=0, le=600_000, description="How long a cancel takes.")
    hold_until: str | None = Field(default=None, description="Latch to wait on before call `hold_at_step`.")
    hold_at_step: int = Field(default=1, ge=1, le=10_000, description="The call that waits for `hold_until`.")
    cancel_hold_until: str | None = Field(default=None, description="A cancel is confirmed once this latch opens.")
    hold_timeout_ms: int = Field(
        default=DEFAULT_HOLD_TIMEOUT_MS, ge=1, le=3_600_000, description="A latch not released by then opens itself."
    )

    @field_validator("hold_until", "cancel_hold_until")
    @classmethod
    def _latch_name(cls, name: str | None) -> str | None:
        if name is not None and not LATCH_NAME.fullmatch(name):
            raise ValueError(f"a latch name is {LATCH_NAME_RULE}")
        return name

    @field_validator("steps")
    @classmethod
    def _steps_reach_the_end(cls, steps: int, info: ValidationInfo) -> int:
        end = info.data.get("end")
        if end in (ScriptEnd.COMPLETE, ScriptEnd.QUESTION, ScriptEnd.AUTHORIZATION) and steps < 1:
            raise ValueError(f"must be at least 1 when end is {end.value!r}")
        return steps

    @field_validator("options", mode="before")
    @classmethod
    def _pairs_as_options(cls, options: Any) -> Any:
        if not isinstance(options, list):
            return options
        return [
            {"id": option[0], "label": option[1]} if isinstance(option, list | tuple) and len(option) == 2 else option
            for option in options
        ]

    @model_validator(mode="after")
    def _choices_of_a_question(self) -> Self:
        structured = bool(self.options) or self.free_text or self.question_id is not None
        if structured and self.end is not ScriptEnd.QUESTION:
            raise ValueError("options, free_text and question_id are for end 'question'")
        if structured:
            self.ask_owner_arguments("check")  # the contract's rules for a question's choices, checked at create
        return self

    def ask_owner_arguments(self, question: str) -> dict[str, Any]:
        """What the scripted model passes to ask_owner at the end "question"."""
        arguments: dict[str, Any] = {"question": self.question or question}
        if self.options or self.free_text or self.question_id is not None:
            arguments |= {"options": [option.model_dump() for option in self.options], "free_text": self.free_text}
        if self.question_id is not None:
            arguments["question_id"] = self.question_id
        parse_arguments(ToolCall(call_id="check", name=ASK_OWNER, arguments=arguments))
        return arguments

    @field_validator("compact_at")
    @classmethod
    def _compaction_after_the_first_call(cls, compact_at: list[int]) -> list[int]:
        for index in compact_at:
            if index < 2:
                raise ValueError(f"{index} is not a call after the first (use 2 or more)")
        return compact_at

    @field_validator("tool_calls")
    @classmethod
    def _tool_calls_before_the_end(
        cls, tool_calls: list[ScriptedToolCall], info: ValidationInfo
    ) -> list[ScriptedToolCall]:
        end, steps = info.data.get("end"), info.data.get("steps")
        if end is None or steps is None or end is ScriptEnd.RUN:
            return tool_calls
        # The final text of a completing turn comes without tool calls, so its tools go before it.
        last_allowed = steps - 1 if end is ScriptEnd.COMPLETE else steps
        for position, call in enumerate(tool_calls):
            if call.step > last_allowed:
                raise ValueError(
                    f"[{position}].step {call.step} is after the last call that may use tools "
                    f"({last_allowed}) for end {end.value!r}"
                )
        return tool_calls

    @property
    def holds(self) -> LatchHolds:
        return LatchHolds(self.hold_until, self.hold_at_step, self.cancel_hold_until, self.hold_timeout_ms)

    def tool_calls_at(self, index: int) -> list[ScriptedToolCall]:
        return [call for call in self.tool_calls if call.step == index]

    def prompt_tokens(self, index: int) -> tuple[int, bool]:
        """The prompt size of call `index` and whether the context was compacted just before it."""
        prompt = self.input_tokens
        compacted = False
        for call in range(2, index + 1):
            compacted = call in self.compact_at
            if compacted:
                prompt = self.compact_to_tokens if self.compact_to_tokens is not None else int(prompt * 0.3)
            else:
                prompt += self.input_growth
        return prompt, compacted


def _describe(problem: Any) -> tuple[str, str]:
    location = ".".join(str(part) for part in problem.get("loc", ()))
    field = f"script.{location}" if location else "script"
    message = str(problem.get("msg", "is invalid")).removeprefix("Value error, ")
    if problem.get("type") == "extra_forbidden":
        message = "is not a known script field"
    return field, message


# A plain task asks for a mail with one of these words (English, Russian stems) or names the tool itself, as a grant's
# follow-up names the boundary item granted (`send_mail to carol@example.com`); whom it names: an address written in
# it, or after "to" the name before the "@" of a recipient its boundary lets it mail.
_ASKS_FOR_MAIL = re.compile(r"\b(?:e-?mail|mail|send|forward|send_mail)\b|\b(?:отправ|перешл|пошл)", re.IGNORECASE)
_ADDRESS_IN_TEXT = re.compile(r"[\w.%+-]+@[\w-]+(?:\.[\w-]+)+")
_TO_NAME = re.compile(r"\bto\s+([\w.+-]+)", re.IGNORECASE)
PLAIN_MAIL_STEP = 2


def plain_task_script(task: str, boundary: Sequence[str] = (), language: str = "en") -> Script:
    """The script of a task without a block: the defaults (three calls, then complete); a task that asks for a mail
    also sends one at call 2 to each recipient it names (see above). The core's boundary check decides as for any
    call: a recipient outside the boundary is refused, and the outcome says so."""
    if not _ASKS_FOR_MAIL.search(task):
        return Script()
    recipients = [address.lower() for address in _ADDRESS_IN_TEXT.findall(task)]
    names = {name.casefold() for name in _TO_NAME.findall(task)}
    items, _ = readable_items(boundary)
    for item in items:
        if item.tool == "send_mail":
            recipients += [target for target in item.targets if target.split("@", 1)[0].casefold() in names]
    title = task_title(task)
    body = text("scripted.mail_body", language, title=title)
    calls = [
        ScriptedToolCall(step=PLAIN_MAIL_STEP, tool="send_mail", args={"to": to, "subject": title, "body": body})
        for to in dict.fromkeys(recipients)
    ]
    return Script(tool_calls=calls)


def parse_script(task: str, boundary: Sequence[str] = (), language: str = "en") -> Script:
    """The task's script, or the plain task's when it has no block (`plain_task_script`). Raises `ScriptError`."""
    blocks = _BLOCK.findall(task)
    if not blocks:
        return plain_task_script(task, boundary, language)
    if len(blocks) > 1:
        raise ScriptError(
            "script", f"script: the task has {len(blocks)} {BLOCK_LANGUAGE} blocks; at most one is allowed"
        )
    try:
        data = json.loads(blocks[0])
    except json.JSONDecodeError as error:
        raise ScriptError("script", f"script: the {BLOCK_LANGUAGE} block is not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise ScriptError("script", f"script: the {BLOCK_LANGUAGE} block must be a JSON object")
    return _validated(data)


def _validated(data: dict[str, Any]) -> Script:
    try:
        return Script.model_validate(data)
    except ValidationError as error:
        problems = [_describe(problem) for problem in error.errors()]
        raise ScriptError(problems[0][0], "; ".join(f"{where}: {what}" for where, what in problems)) from None


def with_follow_up_script(task: str, earlier_task: str) -> str:
    """A follow-up's task with the script its earlier session's task names for it (`follow_up`), when the task has
    none of its own; else the task as it is."""
    if _BLOCK.search(task):
        return task
    try:
        follow_up = parse_script(earlier_task).follow_up
    except ScriptError:
        return task
    if follow_up is None:
        return task
    return scripted_task(task, **follow_up.model_dump(mode="json", exclude_unset=True))


def strip_script(task: str) -> str:
    return _BLOCK.sub("", task)


def task_title(task: str) -> str:
    """The task's first nonblank line outside the script block, cut to a readable length."""
    for line in strip_script(task).splitlines():
        if line.strip():
            title = line.strip()
            return title if len(title) <= TITLE_MAX_CHARS else title[: TITLE_MAX_CHARS - 1] + "…"
    return "task"


def scripted_task(text: str, **fields: Any) -> str:
    """`text` with a helper-script block of `fields` appended (checked now, so mistakes fail early).

    Fields: steps, step_ms, input_tokens, input_growth, cached_ratio, output_tokens, compact_at,
    compact_to_tokens, tool_calls (dicts {"step", "tool", "args"}), end, question, options (id/label pairs),
    free_text, question_id (a structured question), authorization, error, final_text, follow_up (the script of a
    follow-up of this session), recall (follow-ups: see
    `reference.core.scripted_model`), cancel_delay_ms, hold_until, hold_at_step, cancel_hold_until, hold_timeout_ms
    (latches: see `reference.core.latches`).
    """
    script = _validated(fields)
    block = json.dumps(script.model_dump(mode="json", exclude_unset=True), ensure_ascii=False)
    return f"{text.rstrip()}\n\n```{BLOCK_LANGUAGE}\n{block}\n```\n"
