"""The ``make autoscale`` model's mechanics, on tiny synthetic traces (each test well under a second)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest

from bench import autoscale as A
from contracts import metrics as M
from lambdas.control_plane.decision import JobView
from lambdas.control_plane.service import ControlPlane
from lambdas.control_plane.settings import ControlSettings, load_settings


def _settings(max_workers: int = 10) -> ControlSettings:
    return load_settings(job_name="t", min_workers=2, max_workers=max_workers, worker_mb_s=56.0)


def _flat(mb_s: float, hours: float) -> list[float]:
    return [mb_s * 1e6 * A.STEP_S] * int(hours * A.STEPS_PER_HOUR)


def _resized(sizes: list[int], trace: list[float]) -> tuple[A.Replay, A.CloudWatch]:
    """A job publishing to CloudWatch, run to a plan of sizes per hour."""
    cw = A.CloudWatch()
    job = A.Job(56e6, cw)
    job.start(sizes[0], 0.0, warm=True)
    return A.Replay("t", job, A.Plan(sizes), cw).run_to(trace, len(trace)), cw


def _events(replay: A.Replay, kind: str) -> list[float]:
    return [t for t, e in replay.job.log if e == kind]


def test_a_resize_costs_the_stop_the_tick_on_the_run_s_end_and_the_start_up() -> None:
    r, cw = _resized([3, 5], _flat(50, 1.5))
    request = 3600 + A.TICK_OFFSET_S  # the first tick of hour 1
    (stopped,) = _events(r, "stopped")
    restart = _events(r, "start")[1]
    up = _events(r, "up")[1]
    # the job-state-change rule ticks within a step of the run's end: no wait for the schedule
    assert request <= stopped < restart <= stopped + A.STEP_S
    assert up == restart + A.START_UP_S
    batches = list(zip(cw.times[M.UTILIZATION.name], cw.values[M.UTILIZATION.name], strict=True))
    assert not [t for t, _ in batches if stopped < t < up + A.BATCH_FIXED_S + A.COLD_BATCH_S]
    first = next(u for t, u in batches if t > up)
    assert first * A.TRIGGER_S >= A.BATCH_FIXED_S + A.COLD_BATCH_S  # the cold batch
    assert r.restarts == 1
    assert r.actions == 1
    assert r.job.run is not None
    assert r.job.run.workers == 5
    # the dead time's arrivals age: at least stop -> start -> 90 s start-up -> cold batch
    assert max(r.ages) >= up - stopped + A.BATCH_FIXED_S + A.COLD_BATCH_S


def test_no_backlog_datapoint_while_the_job_is_down_or_starting() -> None:
    r, cw = _resized([3, 5, 2], _flat(50, 2.5))
    ups = _events(r, "up")
    downs = _events(r, "stopped")
    assert len(ups) == 3
    assert len(downs) == 2
    spans = list(zip(ups, [*downs, float("inf")], strict=True))
    published = cw.times[M.BACKLOG_MANIFESTS.name]
    assert published
    assert all(any(a <= t <= b for a, b in spans) for t in published)


def test_a_run_is_billed_a_minute_at_least() -> None:
    job = A.Job(56e6)
    job.start(4, 100.0)
    job.request_stop(120.0)  # still starting: it stops at once
    assert job.worker_seconds == 4 * A.MIN_BILLED_S
    job.start(3, 200.0)
    job.advance(1000.0)  # nothing waits: no batch in flight
    job.request_stop(1000.0)
    assert job.worker_seconds == 4 * A.MIN_BILLED_S + 3 * 800.0


def test_a_stop_longer_than_600_s_is_forced_and_its_batch_redone() -> None:
    job = A.Job(1e6)
    job.start(2, 0.0, warm=True)
    job.add([A.Manifest(0.0, 1e9)])  # a 1000 s batch on one executor
    job.advance(10.0)
    job.request_stop(10.0)
    job.advance(10_000.0)
    assert _events(A.Replay("t", job, A.Plan([2])), "forced") == [10.0 + A.FORCED_STOP_S]
    assert len(job.waiting) == 1


def test_the_reader_returns_the_current_partial_minute_60_s_late() -> None:
    cw = A.CloudWatch()
    for i in range(30):
        cw.put(M.BYTES_PER_MANIFEST.name, i * 10.0, 1.0)
    cw.now = 140.0  # readable: published at or before 80 s
    assert cw.series(M.BYTES_PER_MANIFEST.name, minutes=30, stat="Sum") == [6.0, 3.0]
    assert cw.age_s(M.BYTES_PER_MANIFEST.name, minutes=30) == 80.0


def test_the_model_observes_what_the_lambda_observes() -> None:
    s = _settings()
    r, cw = _resized([3, 4], _flat(80, 1.2))
    cw.now = r.step * A.STEP_S
    view = r.job.view(cw.now, None)
    # the model's controller and the Lambda's tick, on the same metrics and the same job
    policy = A.Policy(s, cw)
    policy.decide(view, cw.now)

    class Jobs:
        def view(self, *, paused: bool, desired_workers: int | None) -> JobView:
            return view

    class State:
        def load_versioned(self) -> tuple[dict[str, Any], str | None]:
            return {"paused": False}, None

    clock = A.T0 + timedelta(seconds=cw.now)
    plane = ControlPlane(s, jobs=cast(Any, Jobs()), metrics=cw, state=cast(Any, State()), clock=lambda: clock)
    plane._decide()
    assert plane._observed == policy.observed
    assert policy.observed.arrival_bytes_per_s and policy.observed.backlog_bytes
    # the job's own figures taught the rate (5 s a batch of fixed cost excluded): its true speed
    assert policy.observed.worker_bytes_per_s == pytest.approx(56e6)


def test_per_hour_hindsight_is_no_dearer_than_a_constant_size_on_a_falling_load() -> None:
    s = _settings()
    trace = _flat(300, 1) + _flat(30, 2)
    hourly, day = A.per_hour(trace, s), A.whole_day(trace, s)
    assert day is not None
    assert hourly.worker_hours <= day.worker_hours
    assert max(hourly.ages) <= s.latency_sla_s
    assert isinstance(hourly.controller, A.Plan)
    assert hourly.controller.sizes[0] > hourly.controller.sizes[-1]


@pytest.mark.parametrize("mb_s", [10.0, 100.0])
def test_a_job_that_keeps_up_holds_about_a_trigger_of_backlog(mb_s: float) -> None:
    s = _settings()
    trace = _flat(mb_s, 0.5)
    r = A.planned(s, A.warm_size(trace, s), "t").run_to(trace, len(trace))
    assert max(r.ages) <= 2 * A.TRIGGER_S
    assert r.worker_hours == pytest.approx(A.warm_size(trace, s) * 0.5)


@pytest.mark.parametrize("name", ["step", "spike"])
def test_the_policy_meets_the_sla_near_the_hindsight_without_reversals(name: str) -> None:
    # 4 hours of the model's own traces (the full day per trace and speed: make autoscale)
    s = load_settings(job_name="t", min_workers=2, max_workers=20, worker_mb_s=56.0)
    trace = A.traces(4, 7)[name]
    run, hourly = A.replay_policy(trace, s, "need"), A.per_hour(trace, s)
    assert max(hourly.ages) <= s.latency_sla_s
    assert max(run.ages) <= s.latency_sla_s
    assert run.reversals == 0 and run.actions >= 1  # it followed the load
    # no scale-down within an hour of an up (decision.DOWN_AFTER_UP_S): the hour held weighs more in
    # 4 hours than in a day (make autoscale, 24 h: step 1.03x at 56 MB/s, spike 1.30x)
    assert run.worker_hours <= 1.35 * hourly.worker_hours


def test_the_surge_signal_brings_the_slow_backfill_within_the_sla() -> None:
    # Issue 24's slow backfill: 99 GB at once on an 8-worker run of 0.74 MB/s workers. On CloudWatch
    # alone the first tick sees it 130 s late and the graceful stop waits for the batch the small run
    # took from it: 810 s. The signal has the control plane list the manifests 10 s after they are
    # written and stop the run before that batch starts (make autoscale: 590 s, hindsight 600 s).
    (slow,) = A.speeds("0.74", 56.0, 20)
    trace = A.traces(3, 7, slow.scale)["backfill"]
    s = load_settings(job_name="t", min_workers=2, max_workers=slow.max_workers, worker_mb_s=slow.worker_mb_s)
    signalled = A.replay_policy(trace, s, "need")
    unsignalled = A.replay_policy(trace, s, "need", surges=False)
    assert max(unsignalled.ages) > s.latency_sla_s
    assert max(signalled.ages) <= s.latency_sla_s
    assert signalled.surges == 1 and signalled.reversals == 0
    # the signalled run reaches the ceiling earlier, so holds it a little longer (no scale-down within
    # an hour of an up): within 5 % of the run that missed the SLA
    assert signalled.worker_hours <= 1.05 * unsignalled.worker_hours


@pytest.mark.parametrize("name", ["seed", "spike", "ramp"])
def test_a_signal_without_a_dump_changes_nothing(name: str) -> None:
    # every 10 s flush of these traces is over 1 GiB, so the Lambda signals every 30 s; none is more
    # than max_workers clear in 120 s, so no signal becomes a decision
    s = load_settings(job_name="t", min_workers=2, max_workers=20, worker_mb_s=56.0)
    trace = A.traces(3, 7)[name]
    signalled, unsignalled = A.replay_policy(trace, s, "need"), A.replay_policy(trace, s, "need", surges=False)
    assert signalled.signals > 100 and signalled.surges == 0
    assert signalled.ages == unsignalled.ages and signalled.workers == unsignalled.workers


@pytest.mark.parametrize("flushes", [6, 18])
def test_a_dump_written_over_minutes_is_sized_for_in_one_resize(flushes: int) -> None:
    # the backfill's 99 GB written over 1 or 3 minutes instead of one flush: the surge counts the
    # minute's writes as arriving, so the first resize is to the ceiling, not to a part of the dump
    # (it was 2 -> 15 -> 20 at 56 MB/s: two resizes, 770 s against 630 s without the signal)
    (slow,) = A.speeds("0.74", 56.0, 20)
    trace = A.traces(3, 7, slow.scale)["backfill"]
    at, dump = int(len(trace) * 0.1), 500e9 * slow.scale
    trace[at] -= dump
    for k in range(flushes):
        trace[at + k] += dump / flushes
    s = load_settings(job_name="t", min_workers=2, max_workers=slow.max_workers, worker_mb_s=slow.worker_mb_s)
    signalled = A.replay_policy(trace, s, "need")
    unsignalled = A.replay_policy(trace, s, "need", surges=False)
    assert signalled.surges >= 1
    after = signalled.workers[at:]
    reached = after.index(slow.max_workers)
    assert {w for w in after[:reached] if w} == {after[0]}  # from the size it had, straight to the ceiling
    assert max(signalled.ages) <= max(unsignalled.ages)
    assert signalled.reversals == 0


def test_a_run_takes_manifests_to_its_budget_by_their_bytes_not_one_at_a_time() -> None:
    # Issue 46: a 1 GiB budget counted at 1 GiB a manifest took one 77 MB manifest a trigger (2.6
    # MB/s) of 7.7 MB/s arriving. Counted by the waiting manifests' bytes (contracts.intake, the job's
    # own rule), the run keeps up: its backlog stays about a trigger old
    cw = A.CloudWatch()
    job = A.Job(0.74e6, cw)
    job.start(20, 0.0, warm=True, intake=float(1024**3))
    trace = _flat(7.7, 1)
    r = A.Replay("t", job, A.Plan([20]), cw).run_to(trace, len(trace))
    assert job.run is not None and job.run.count >= 10  # replanned from one full manifest's count
    assert max(r.ages[A.STEPS_PER_HOUR // 4 :]) <= 3 * A.TRIGGER_S


@pytest.mark.parametrize("speed", ["0.74", "168"])
@pytest.mark.parametrize("name", ["diurnal", "seed", "ramp"])
def test_a_day_at_either_worker_speed_reverses_at_most_twice_within_an_hour(speed: str, name: str) -> None:
    # Issue 46's done-when, the policy's part (the hindsight ratios: make autoscale)
    (sp,) = A.speeds(speed, 56.0, 20)
    s = load_settings(job_name="t", min_workers=2, max_workers=sp.max_workers, worker_mb_s=sp.worker_mb_s)
    run = A.replay_policy(A.traces(24, 7, sp.scale)[name], s, "need")
    assert max(run.ages) <= s.latency_sla_s
    assert run.reversals == 0
    assert run.reversals_hour <= 2
