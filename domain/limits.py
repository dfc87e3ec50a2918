"""The seed's limit constants and the effective limits of one helper (SPEC "Limits", R1).

The names are the seed's (`HELPER_MAX_OPEN`, ...). Every value can be overridden by an environment
variable of the same name (see `domain.settings`), and a request may only tighten them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

HELPER_MAX_OPEN = 3
HELPER_MAX_RUNNING = 3
HELPER_MAX_ROWS = 20
HELPER_DEADLINE_MS = 2_700_000
HELPER_GRACE_MS = 120_000
HELPER_CEILING_TOKENS = 1_000_000
HELPER_CHECK_MS = 15_000
HELPER_SUMMARY_MAX = 1_500
HELPER_KEEP_MS = 86_400_000
TURN_MAX_STEPS_HELPER = 80
HELPER_INPUT_CEILING_TOKENS = 4_000_000

# Bounds on what a request may carry, so a typo cannot admit a 10 MB task.
HELPER_TASK_MAX_CHARS = 20_000
HELPER_BOUNDARY_MAX_ITEMS = 20
HELPER_BOUNDARY_ITEM_MAX_CHARS = 200


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

    poll_ms: int = Field(default=500, gt=0, description="Between snapshots; changes show within about this.")
    # A follow attempt polls for one window, then ends and is retried by Temporal with its heartbeat
    # details: attempts stay bounded, history gains nothing, and time-skipping tests can skip.
    window_ms: int = Field(default=600_000, gt=0)
    resume_ms: int = Field(default=1_000, gt=0)
    silence_ms: int = Field(default=300_000, gt=0, description="No valid core answer this long: failed.")
    bad_answers: int = Field(default=5, gt=0, description="Consecutive malformed core answers before failed.")


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
