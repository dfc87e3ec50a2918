"""The work counter (R12) and the usage a helper folds from its session's steps (R11)."""

from __future__ import annotations

import itertools
import random

from hypothesis import given
from hypothesis import strategies as st

from contracts.core_api import StepUsage
from domain.work import Usage, fold_usage, work_tokens


def steps_of(*pairs: tuple[int, int]) -> list[StepUsage]:
    """Steps numbered from 1 with the given (input, output) token counts."""
    return [StepUsage(index=i, input_tokens=inp, output_tokens=out) for i, (inp, out) in enumerate(pairs, start=1)]


def independent_work(pairs: list[tuple[int, int]]) -> int:
    """R12 written another way: first input whole, then the positive input growth, plus every output."""
    if not pairs:
        return 0
    inputs = [inp for inp, _ in pairs]
    growth = sum(max(0, later - earlier) for earlier, later in itertools.pairwise(inputs))
    return inputs[0] + growth + sum(out for _, out in pairs)


def test_no_steps_is_no_work() -> None:
    """R12: a session without steps has done no work."""
    assert work_tokens([]) == 0


def test_first_step_input_counts_whole() -> None:
    """R12: the first step's input is counted whole, plus its output."""
    assert work_tokens(steps_of((1_000, 50))) == 1_050


def test_growing_prompt_counts_only_the_growth() -> None:
    """R12: each later step adds only what its prompt grew by, plus its output."""
    # 1000 + 50, then +500 + 70, then +300 + 20
    assert work_tokens(steps_of((1_000, 50), (1_500, 70), (1_800, 20))) == 1_050 + 570 + 320


def test_compaction_adds_zero_input() -> None:
    """R12: a prompt that shrinks after compaction adds no input, only its output."""
    steps = [
        StepUsage(index=1, input_tokens=10_000, output_tokens=100),
        StepUsage(index=2, input_tokens=12_000, output_tokens=100),
        StepUsage(index=3, input_tokens=3_000, output_tokens=40, compacted=True),
        StepUsage(index=4, input_tokens=3_500, output_tokens=10),
    ]
    # 10000+100, +2000+100, +0+40 (compaction), +500+10 (growth from the compacted prompt)
    assert work_tokens(steps) == 10_100 + 2_100 + 40 + 510


def test_cached_input_is_part_of_input_tokens() -> None:
    """R12: `input_tokens` is the whole prompt incl. cached; cached tokens are neither added nor subtracted."""
    plain = steps_of((1_000, 10), (2_000, 10))
    cached = [
        StepUsage(index=1, input_tokens=1_000, cached_input_tokens=0, output_tokens=10),
        StepUsage(index=2, input_tokens=2_000, cached_input_tokens=1_000, output_tokens=10),
    ]
    assert work_tokens(cached) == work_tokens(plain) == 2_020


def test_steps_out_of_order_are_sorted_by_index() -> None:
    """R12: the counter follows the step index, not the order the snapshot lists steps in."""
    ordered = steps_of((1_000, 0), (3_000, 0), (2_000, 0))  # 1000 + 2000 + 0 = 3000
    shuffled = [ordered[2], ordered[0], ordered[1]]
    assert work_tokens(ordered) == 3_000
    assert work_tokens(shuffled) == 3_000
    # Taken in list order it would have been 2000 + 0 + 2000 = 4000: the sort matters.
    assert work_tokens([StepUsage(index=i + 1, **s.model_dump(exclude={"index"})) for i, s in enumerate(shuffled)]) == (
        4_000
    )


def test_fold_usage_counts_steps_work_and_cumulative_input() -> None:
    """R11: the row shows steps, the work counter and the core's cumulative input (incl. cached)."""
    steps = steps_of((1_000, 50), (1_500, 70))
    assert fold_usage(steps, input_tokens_total=2_500) == Usage(steps=2, work_tokens=1_620, input_tokens=2_500)
    assert fold_usage([], input_tokens_total=0) == Usage()


token_pairs = st.lists(
    st.tuples(st.integers(min_value=0, max_value=200_000), st.integers(min_value=0, max_value=20_000)),
    max_size=40,
)


@given(pairs=token_pairs)
def test_work_equals_the_formula(pairs: list[tuple[int, int]]) -> None:
    """R12: the counter equals the seed's formula computed independently."""
    assert work_tokens(steps_of(*pairs)) == independent_work(pairs)


@given(pairs=token_pairs, new=st.tuples(st.integers(0, 200_000), st.integers(0, 20_000)))
def test_appending_a_step_never_decreases_work(pairs: list[tuple[int, int]], new: tuple[int, int]) -> None:
    """R12: an appended step adds its input growth (never negative) plus its output."""
    before = work_tokens(steps_of(*pairs))
    after = work_tokens(steps_of(*pairs, new))
    last_input = pairs[-1][0] if pairs else 0
    assert after >= before
    assert after - before == max(0, new[0] - last_input) + new[1]


@given(pairs=token_pairs, seed=st.integers(0, 2**32 - 1))
def test_listing_order_does_not_matter(pairs: list[tuple[int, int]], seed: int) -> None:
    """R12: any listing order of the same indexed steps gives the same counter."""
    steps = steps_of(*pairs)
    shuffled = list(steps)
    random.Random(seed).shuffle(shuffled)
    assert work_tokens(shuffled) == work_tokens(steps)
