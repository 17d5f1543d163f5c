"""The decision function on scripted metric timelines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lambdas.control_plane.decision import JobView, Observation, decide, restart_delay_s
from lambdas.control_plane.settings import load_settings

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
# the utilization policy (worker_mb_s=0); the need-based one is tested in test_need.py
S = load_settings(job_name="ingest", min_workers=2, max_workers=10, cooldown_s=600, worker_mb_s=0)
RUNNING = JobView("RUNNING", workers=4, started_at=NOW - timedelta(hours=2))


def play(utilization: list[float], ages: list[float] | None = None, job: JobView = RUNNING) -> list[tuple[str, int]]:
    """Decide at every step of a timeline, applying scale decisions like the Lambda would."""
    out = []
    for i in range(1, len(utilization) + 1):
        d = decide(Observation(utilization[:i], (ages or [])[:i]), job, S, NOW)
        out.append((d.action, d.desired_workers))
        if d.action == "scale":
            job = JobView("RUNNING", workers=d.desired_workers, started_at=NOW - timedelta(hours=2))
    return out


def test_steady_load_holds() -> None:
    assert {a for a, _ in play([0.5] * 10)} == {"none"}


def test_step_up_scales_up_after_two_high_datapoints() -> None:
    steps = play([0.5, 0.5, 0.85, 0.9])
    assert steps[:3] == [("none", 4), ("none", 4), ("none", 4)]
    assert steps[3] == ("scale", 6)  # ceil(4 * 0.9 / 0.6)


def test_a_single_spike_below_capacity_is_ignored() -> None:
    assert [a for a, _ in play([0.5, 0.95, 0.5, 0.5])] == ["none"] * 4


def test_at_capacity_scales_at_once() -> None:
    assert play([0.5, 1.2])[-1] == ("scale", 8)


def test_growing_backlog_doubles_even_at_moderate_utilization() -> None:
    assert play([0.5, 0.5, 0.5], ages=[200, 400, 700])[-1] == ("scale", 8)


def test_drain_scales_down_one_worker_after_enough_calm() -> None:
    steps = play([0.1] * 6)
    assert steps[:5] == [("none", 4)] * 5
    assert steps[5] == ("scale", 3)


def test_flapping_around_the_thresholds_does_nothing() -> None:
    assert {a for a, _ in play([0.79, 0.81] * 5)} == {"none"}
    assert {a for a, _ in play([0.29, 0.31] * 5)} == {"none"}


def test_missing_data_holds() -> None:
    d = decide(Observation(), RUNNING, S, NOW)
    assert (d.action, d.desired_workers) == ("none", 4)
    assert "no utilization" in d.reason


def test_bounds_and_cooldown() -> None:
    at_max = JobView("RUNNING", workers=10, started_at=NOW - timedelta(hours=1))
    assert decide(Observation([1.5, 1.5]), at_max, S, NOW).action == "none"
    young = JobView("RUNNING", workers=4, started_at=NOW - timedelta(minutes=5))
    d = decide(Observation([1.5, 1.5]), young, S, NOW)
    assert (d.action, "cool-down" in d.reason) == ("none", True)
    at_min = JobView("RUNNING", workers=2, started_at=NOW - timedelta(hours=1))
    assert decide(Observation([0.0] * 6), at_min, S, NOW).action == "none"


def test_failed_runs_restart_with_back_off_then_alarm() -> None:
    def failed(n, ago):
        return JobView(
            "FAILED",
            workers=4,
            consecutive_failures=n,
            last_failure_at=NOW - timedelta(seconds=ago),
        )

    assert restart_delay_s(1, S) == 60 and restart_delay_s(3, S) == 240 and restart_delay_s(20, S) == 1800
    assert decide(Observation(), failed(1, 10), S, NOW).action == "wait"
    assert decide(Observation(), failed(1, 61), S, NOW).action == "restart"
    assert decide(Observation(), failed(3, 200), S, NOW).action == "wait"
    assert decide(Observation(), failed(6, 9999), S, NOW).action == "alarm"


@pytest.mark.parametrize("state", ["NONE", "STOPPED", "SUCCEEDED"])
def test_no_active_run_starts_one(state: str) -> None:
    d = decide(Observation(), JobView(state, desired_workers=5), S, NOW)
    assert (d.action, d.desired_workers) == ("start", 5)


def test_paused_job_is_left_alone() -> None:
    assert decide(Observation(), JobView("STOPPED", paused=True), S, NOW).action == "none"


@pytest.mark.parametrize("state", ["STARTING", "RUNNING", "WAITING"])
def test_a_run_active_while_paused_is_stopped(state: str) -> None:
    # a start that raced the operator's stop, or one from the console: the stop is never undone
    d = decide(Observation([1.5, 1.5]), JobView(state, workers=4, paused=True, desired_workers=6), S, NOW)
    assert (d.action, d.desired_workers) == ("stop", 6)


def test_glue_auto_scaling_mode_does_not_resize() -> None:
    auto = load_settings(job_name="ingest", scaling_mode="glue-auto-scaling")
    assert decide(Observation([1.5, 1.5]), RUNNING, auto, NOW).action == "none"


@pytest.mark.parametrize("state", ["TIMEOUT", "EXPIRED"])
def test_routine_ends_are_not_failures(state: str) -> None:
    # TIMEOUT and a maintenance restart (EXPIRED, long enough ago) start at once, no back-off
    job = JobView(state, workers=4, ended_at=NOW - timedelta(hours=1))
    d = decide(Observation(), job, S, NOW)
    assert (d.action, d.desired_workers) == ("start", 4)
