"""The seed's work counter (R12) and the usage a helper folds from its session's steps (R11).

Work = sum over steps of max(0, input_i - input_(i-1)) + output_i, the first step's input counted
whole. `input_i` is the whole prompt of call i, cached part included; a prompt that shrinks after
compaction adds zero. Actual paid input can exceed this counter: that is the seed's rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from contracts.core_api import StepUsage


class Usage(BaseModel):
    """What a helper's row shows of its session's consumption."""

    steps: int = 0
    work_tokens: int = 0
    input_tokens: int = 0  # cumulative input incl. cached, the core's own ceiling counter


def work_tokens(steps: Sequence[StepUsage]) -> int:
    total = 0
    previous_input = 0
    for step in sorted(steps, key=lambda s: s.index):
        total += max(0, step.input_tokens - previous_input) + step.output_tokens
        previous_input = step.input_tokens
    return total


def fold_usage(steps: Sequence[StepUsage], input_tokens_total: int) -> Usage:
    return Usage(steps=len(steps), work_tokens=work_tokens(steps), input_tokens=input_tokens_total)
