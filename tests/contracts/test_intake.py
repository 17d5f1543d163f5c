"""A trigger's count of manifests follows the data bytes they reference (contracts.intake)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contracts.intake import BURST_BUDGETS, REPLAN_FACTOR, manifests_per_trigger, most_manifests, replanned

GIB = 1024**3
MB = 10**6


def test_small_manifests_fill_the_budget_where_a_count_at_1_gib_took_one() -> None:
    # Issue 46: at a low rate a manifest holds one 20 s window, 150 MB; a 1 GiB budget counted at
    # 1 GiB a manifest took one of them per trigger
    waiting = [150 * MB] * 20
    count = manifests_per_trigger(GIB, waiting, most=100, unknown_size=GIB)
    assert count == 7  # 7 x 150 MB = 1.05 GB <= 1.07 GB; 8 would not fit
    assert sum(waiting[:count]) <= GIB < sum(waiting[: count + 1])


def test_past_the_waiting_ones_the_count_goes_on_at_their_median_within_a_burst_bound() -> None:
    # two wait (the job keeps up): the rest of the budget counts manifests of their size
    assert manifests_per_trigger(GIB, [100 * MB, 120 * MB], most=100, unknown_size=GIB) == 2 + (GIB - 220 * MB) // (
        110 * MB
    )
    # but never more than full manifests following them would make BURST_BUDGETS budgets of (review of
    # issue 46, finding 1: two 10 MB manifests asked for 1,700 at a 1 GiB budget)
    assert manifests_per_trigger(GIB, [10 * MB, 10 * MB], most=10_000, unknown_size=GIB) == 2 + 15
    # none wait: the job's assumption, full manifests
    assert manifests_per_trigger(16 * GIB, [], most=100, unknown_size=GIB) == 16


@given(
    budget=st.integers(GIB, 10**13),
    waiting=st.lists(st.integers(1, GIB), max_size=60),
)
def test_full_manifests_after_the_waiting_ones_take_at_most_the_burst_bound(budget: int, waiting: list[int]) -> None:
    count = manifests_per_trigger(budget, waiting, most=10_000, unknown_size=GIB)
    listed = waiting[:count]
    assert sum(listed) + (count - len(listed)) * GIB <= BURST_BUDGETS * budget + GIB


def test_one_manifest_over_the_budget_is_still_taken() -> None:
    assert manifests_per_trigger(GIB, [3 * GIB, MB], most=100, unknown_size=GIB) == 1


def test_no_budget_takes_the_most() -> None:
    assert manifests_per_trigger(0, [MB] * 5, most=42, unknown_size=GIB) == 42


def test_the_most_never_keeps_full_manifests_from_filling_the_budget() -> None:
    assert most_manifests(64 * GIB, 100, GIB) == 100
    assert most_manifests(1500 * GIB, 100, GIB) == 1500
    # nor passes what the job takes (--max_files_per_trigger <= 10,000)
    assert most_manifests(30 * 10**12, 100, GIB) == 10_000


@given(
    budget=st.integers(1, 10**13),
    waiting=st.lists(st.integers(1, GIB), max_size=60),
    most=st.integers(1, 10_000),
)
def test_the_count_is_within_its_bounds_and_what_it_takes_of_the_waiting_fits(
    budget: int, waiting: list[int], most: int
) -> None:
    count = manifests_per_trigger(budget, waiting, most=most, unknown_size=GIB)
    assert 1 <= count <= most
    taken = waiting[:count]
    if len(taken) > 1:  # the first is always taken; the others only within the budget
        assert sum(taken) <= budget
    if count < min(most, len(waiting)):  # it stopped early only because the next would not fit
        assert sum(waiting[: count + 1]) > budget


def test_a_run_that_keeps_up_keeps_its_count_however_small_the_few_waiting() -> None:
    # one tiny manifest waits: a count raised on it would take a burst of full ones whole
    assert replanned(1, [10_000], budget=GIB, most=100, unknown_size=GIB) is None


def test_a_binding_intake_raises_the_count_and_an_oversized_one_lowers_it() -> None:
    assert replanned(1, [150 * MB] * 20, budget=GIB, most=100, unknown_size=GIB) == 7
    # three tiny ones wait behind a count of one: up to what they and full manifests after them hold
    assert replanned(1, [10 * MB] * 3, budget=GIB, most=10_000, unknown_size=GIB) == 3 + 15
    # 7 manifests of 1 GiB would take 7 budgets: down to 1
    assert replanned(7, [GIB] * 20, budget=GIB, most=100, unknown_size=GIB) == 1
    # within the band: kept
    assert replanned(7, [300 * MB] * 20, budget=GIB, most=100, unknown_size=GIB) is None


@given(
    running=st.integers(1, 200),
    waiting=st.lists(st.integers(1, 2 * GIB), max_size=80),
    budget=st.integers(GIB // 4, 64 * GIB),
)
def test_a_new_count_is_always_a_change_by_the_factor(running: int, waiting: list[int], budget: int) -> None:
    new = replanned(running, waiting, budget=budget, most=200, unknown_size=GIB)
    if new is not None:
        assert new >= running * REPLAN_FACTOR or sum(waiting[:running]) > budget * REPLAN_FACTOR
        assert new != running


def test_the_job_s_defaults_are_the_ones_the_control_plane_counts_with() -> None:
    from contracts.intake import JOB_MAX_FILES, JOB_MAX_MANIFEST_BYTES
    from glue_processor.settings import JobSettings

    fields = JobSettings.model_fields
    assert fields["max_files_per_trigger"].default == JOB_MAX_FILES
    assert fields["max_manifest_bytes"].default == JOB_MAX_MANIFEST_BYTES


def test_the_job_takes_the_most_the_control_plane_may_ask_for() -> None:
    from contracts.intake import JOB_FILES_LIMIT
    from glue_processor.settings import JobSettings

    bounds = [m for m in JobSettings.model_fields["max_files_per_trigger"].metadata if hasattr(m, "le")]
    assert [m.le for m in bounds] == [JOB_FILES_LIMIT]
