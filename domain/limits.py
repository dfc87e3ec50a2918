"""The seed's limit constants and the effective limits of one helper (R1; docs/configuration.md, "The seed's limits").

The names are the seed's (`HELPER_MAX_OPEN`, ...). Every value can be overridden by an environment
variable of the same name (see `config.settings`), and a request may only tighten them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

HELPER_MAX_OPEN = 3
HELPER_MAX_RUNNING = 3
HELPER_MAX_ROWS = 20
HELPER_DEADLINE_MS = 2_700_000
HELPER_GRACE_MS = 120_000
HELPER_CEILING_TOKENS = 1_000_000
HELPER_CHECK_MS = 15_000
HELPER_SUMMARY_MAX = 1_500
HELPER_KEEP_MS = 86_400_000
# A wait for the owner (a question, an authorization) is reminded at these offsets from its delivery (R54).
HELPER_WAIT_REMIND_MS = (7_200_000, 43_200_000)
WAIT_REMINDERS_MAX = 5
TURN_MAX_STEPS_HELPER = 80
HELPER_INPUT_CEILING_TOKENS = 4_000_000

# Bounds on what a request may carry, so a typo cannot admit a 10 MB task.
HELPER_TASK_MAX_CHARS = 20_000
HELPER_BOUNDARY_MAX_ITEMS = 20
HELPER_BOUNDARY_ITEM_MAX_CHARS = 200
# An answer to a question in the owner's words (R49): it becomes the follow-up's task, well within the task's bound.
ANSWER_TEXT_MAX_CHARS = 4_000
# Bounds on what a chat turn's `read` and `delivered` carry (turn ids come from the chat), so no message carries an
# unbounded one (R36). The wire messages (`domain.messages.updates`) and the starter's checks (`starter.inputs`)
# use these.
TURN_MAX_CHARS = 200
# The length of a chat turn's answer that `delivered` reports: far above any chat message, so a number past it is a
# mistake, not an answer.
ANSWER_CHARS_MAX = 1_000_000
READ_MAX_HELPERS = 100
# Answers in one call of `answers` (R56): an owner's waits fit, and the call stays within one write's bound.
ANSWERS_MAX = 20


def delivered_problem(answer_chars: int) -> str | None:
    """What is wrong with a delivery's `answer_chars`, or None: only a turn that sent an answer delivers (R28)."""
    if answer_chars <= 0:
        return "nothing is delivered: the turn sent no answer (answer_chars must be > 0)"
    if answer_chars > ANSWER_CHARS_MAX:
        return f"answer_chars {answer_chars:,} is more than a chat answer has (at most {ANSWER_CHARS_MAX:,})"
    return None


class Limits(BaseModel):
    """The per-helper limits: deadline, grace, work ceiling and the core's own ceilings."""

    model_config = ConfigDict(frozen=True)

    deadline_ms: int = Field(default=HELPER_DEADLINE_MS, gt=0)
    grace_ms: int = Field(default=HELPER_GRACE_MS, gt=0)
    ceiling_tokens: int = Field(default=HELPER_CEILING_TOKENS, gt=0)
    max_steps: int = Field(default=TURN_MAX_STEPS_HELPER, gt=0)
    max_input_tokens: int = Field(default=HELPER_INPUT_CEILING_TOKENS, gt=0)

    @property
    def hard_ceiling_ms(self) -> int:
        """Deadline plus grace: the moment the slot is freed whatever the core does (R15)."""
        return self.deadline_ms + self.grace_ms

    def hard_ceiling_at(self, deadline_at: datetime) -> datetime:
        """The hard ceiling of a helper whose deadline falls at `deadline_at`: the grace after it (R15)."""
        return deadline_at + timedelta(milliseconds=self.grace_ms)


class LimitOverrides(BaseModel):
    """Tighter limits named by a request or by the initiating session; unset fields keep the default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deadline_ms: int | None = Field(default=None, gt=0)
    grace_ms: int | None = Field(default=None, gt=0)
    ceiling_tokens: int | None = Field(default=None, gt=0)
    max_steps: int | None = Field(default=None, gt=0)
    max_input_tokens: int | None = Field(default=None, gt=0)


def effective_limits(defaults: Limits, *tighter: LimitOverrides | None) -> Limits:
    """The minimum, field by field, of the defaults and every set override (R1)."""
    values = defaults.model_dump()
    for overrides in tighter:
        if overrides is None:
            continue
        for name, value in overrides.model_dump(exclude_none=True).items():
            values[name] = min(values[name], value)
    return Limits(**values)


def looser_than(defaults: Limits, overrides: LimitOverrides) -> list[str]:
    """Names of the fields an override tries to raise above the default (a request may only tighten)."""
    current = defaults.model_dump()
    return [name for name, value in overrides.model_dump(exclude_none=True).items() if value > current[name]]


class FollowTuning(BaseModel):
    """How a helper follows its session: poll interval, polling window and the silence budget."""

    model_config = ConfigDict(frozen=True)

    poll_ms: int = Field(
        default=500, gt=0, description="Between snapshots of a core without long poll; changes show within this."
    )
    # A core that versions its snapshots is asked to hold each read until something changes (R44): changes
    # show at once and an idle helper costs 60 000 / wait_ms requests a minute. 0 polls every core.
    wait_ms: int = Field(default=20_000, ge=0, le=60_000, description="The longest wait of one long-poll read.")
    # A follow attempt polls for one window, then ends and is retried by Temporal, resuming from the row:
    # attempts stay bounded, history gains nothing, and time-skipping tests can skip. Each retry is a billable
    # action, so a window is long: a 45-minute helper's follow takes two attempts. It also bounds how long a dead
    # replica's follow waits should the store, which the replicas' liveness records live in, be unreachable.
    window_ms: int = Field(default=1_500_000, gt=0)
    resume_ms: int = Field(default=1_000, gt=0)
    silence_ms: int = Field(default=300_000, gt=0, description="No valid core answer this long: failed.")
    bad_answers: int = Field(default=5, gt=0, description="Consecutive malformed core answers before failed.")


class WaitPolicy(BaseModel):
    """When a wait for the owner is reminded, and when it ends `expired` unanswered, each from its delivery (R54).
    The expiry is at most the row's keep (HELPER_KEEP_MS), which is also its default."""

    model_config = ConfigDict(frozen=True)

    remind_after_ms: tuple[PositiveInt, ...] = Field(default=HELPER_WAIT_REMIND_MS, max_length=WAIT_REMINDERS_MAX)
    expire_after_ms: int | None = Field(default=None, gt=0, description="None: the row's keep (HELPER_KEEP_MS).")

    def beyond_keep(self, keep_ms: int) -> str | None:
        """Why this expiry is not allowed with rows kept `keep_ms`, or None: a wait ends at the latest when its row
        goes."""
        if self.expire_after_ms is None or self.expire_after_ms <= keep_ms:
            return None
        keep = f"the row's keep of {keep_ms} ms"
        return f"{self.expire_after_ms} is above {keep}; a wait ends at the latest when its row goes"

    def expires_after_ms(self, keep_ms: int) -> int:
        return min(self.expire_after_ms or keep_ms, keep_ms)

    def reminders_ms(self, keep_ms: int) -> list[int]:
        """The offsets of the reminders that come before the expiry, in order, each once."""
        return sorted({ms for ms in self.remind_after_ms if 0 < ms < self.expires_after_ms(keep_ms)})


class Policy(BaseModel):
    """An owner's coordinator policy: the admission, slot and retention limits plus the default limits."""

    model_config = ConfigDict(frozen=True)

    max_open: int = Field(default=HELPER_MAX_OPEN, gt=0)
    max_running: int = Field(default=HELPER_MAX_RUNNING, gt=0)
    max_rows: int = Field(default=HELPER_MAX_ROWS, gt=1)
    keep_ms: int = Field(default=HELPER_KEEP_MS, gt=0)
    summary_max: int = Field(default=HELPER_SUMMARY_MAX, gt=10)
    check_ms: int = Field(default=HELPER_CHECK_MS, gt=0)
    limits: Limits = Limits()
    follow: FollowTuning = FollowTuning()
    wait: WaitPolicy = WaitPolicy()

    @model_validator(mode="after")
    def _wait_within_keep(self) -> Policy:
        problem = self.wait.beyond_keep(self.keep_ms)
        if problem is not None:
            raise ValueError(f"a wait's expiry of {problem}")
        return self
