"""The need-based sizing: each rule on scripted observations (the targets on traces: tests/bench)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lambdas.control_plane.decision import JobView, Observation, decide
from lambdas.control_plane.settings import load_settings

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
S = load_settings(job_name="ingest", min_workers=2, max_workers=20, cooldown_s=900, worker_mb_s=56)
OLD = JobView("RUNNING", workers=4, started_at=NOW - timedelta(hours=2))
FRESH = JobView("RUNNING", workers=4, started_at=NOW - timedelta(minutes=2))
MBS = 1e6  # bytes per second in one MB/s


def obs(arrival_mb_s: list[float], backlog_gb: float = 0, age: float = 30, data_age: float | None = 60) -> Observation:
    return Observation(
        backlog_age_s=[age] * len(arrival_mb_s),
        backlog_bytes=[backlog_gb * 1e9] * len(arrival_mb_s),
        arrival_bytes_per_s=[a * MBS for a in arrival_mb_s],
        data_age_s=data_age,
    )


def test_it_holds_when_the_size_fits_the_load() -> None:
    # 3 executors x 56 x 0.85 = 142.8 MB/s >= 130 MB/s
    d = decide(obs([130] * 6), OLD, S, NOW)
    assert (d.action, d.desired_workers) == ("none", 4)


def test_it_scales_up_to_the_need_at_once_even_in_the_cool_down() -> None:
    d = decide(obs([300] * 6), FRESH, S, NOW)
    # 300 MB/s, plus the 45 GB that arrive during the resize's 150 s drained in the 420 s the SLA
    # leaves: 407 MB/s / (56 x 0.85) -> 9 executors, plus the driver
    assert (d.action, d.desired_workers) == ("scale", 10)


def test_a_backlog_is_sized_to_drain_within_the_sla_left_without_any_utilization_datapoint() -> None:
    # no utilization at all (a batch longer than the lookback): backlog age and bytes still decide
    d = decide(obs([50] * 6, backlog_gb=200, age=300), OLD, S, NOW)
    assert d.action == "scale" and d.desired_workers == 20  # 200 GB in 150 s is beyond max_workers
    assert "backlog 197000 MB (age 300s)" in d.reason  # less the 3 GB a job keeping up holds anyway


def test_it_scales_down_to_the_need_not_one_worker_at_a_time() -> None:
    big = JobView("RUNNING", workers=12, started_at=NOW - timedelta(hours=1))
    d = decide(obs([40] * 6), big, S, NOW)
    # planned for 15 % over the recent peak and the resize's dead time: 2 executors, plus the driver
    assert (d.action, d.desired_workers) == ("scale", 3)


def test_no_scale_down_within_the_cool_down_or_with_a_backlog_or_on_a_short_history() -> None:
    big_fresh = JobView("RUNNING", workers=12, started_at=NOW - timedelta(minutes=5))
    big = JobView("RUNNING", workers=12, started_at=NOW - timedelta(hours=1))
    assert decide(obs([40] * 6), big_fresh, S, NOW).action == "none"
    assert decide(obs([40] * 6, age=200), big, S, NOW).action == "none"  # backlog age > SLA / 4
    assert decide(obs([40] * 3), big, S, NOW).action == "none"  # fewer than down_periods minutes


def test_stale_data_is_never_acted_upon() -> None:
    for data_age in (None, 600.0):
        d = decide(obs([300] * 6, data_age=data_age), OLD, S, NOW)
        assert d.action == "none" and "no fresh backlog datapoint" in d.reason
