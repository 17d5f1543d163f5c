"""What the control plane should do: a pure function of metrics, job state and settings."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from lambdas.control_plane.settings import ControlSettings

Action = Literal["none", "start", "restart", "scale", "wait", "alarm"]
ACTIVE = {"STARTING", "RUNNING", "WAITING"}
FAILED = {"FAILED", "ERROR"}
# Runs that ended for a routine reason: not failures, no back-off, no count toward max_restarts.
# TIMEOUT: the job's Timeout ended the run. STOPPED: a graceful BatchStopJobRun (ours: scale,
# restart, stop). EXPIRED: Glue's maintenance restart of a streaming job; per "Maintenance windows
# for AWS Glue Streaming" (docs.aws.amazon.com/glue/latest/dg/glue-streaming-maintenance.html) the
# original run gets the "EXPIRED" status and Glue itself starts a new run with the id
# "<original id>_restart_<n>".
ROUTINE_END = {"TIMEOUT", "STOPPED", "EXPIRED", "SUCCEEDED"}
# How long to leave Glue to start its own maintenance restart before the control plane starts one.
MAINTENANCE_RESTART_GRACE_S = 900
# A scale-down plans for this much more than the recent peak arrival, so it is not reversed soon after.
DOWN_MARGIN = 1.15


@dataclass(frozen=True)
class Observation:
    """Recent metric datapoints, oldest first (one per minute or per batch)."""

    utilization: Sequence[float] = ()
    backlog_age_s: Sequence[float] = ()
    backlog_bytes: Sequence[float] = ()  # data bytes the waiting manifests reference
    arrival_bytes_per_s: Sequence[float] = ()  # data bytes the manifest Lambda listed, per second, per minute
    data_age_s: float | None = None  # seconds since the newest backlog datapoint (None: unknown)


@dataclass(frozen=True)
class JobView:
    """The job's state as the decision needs it."""

    state: str  # latest run's state, or "NONE"
    workers: int | None = None
    started_at: datetime | None = None
    consecutive_failures: int = 0
    last_failure_at: datetime | None = None
    paused: bool = False
    desired_workers: int | None = None  # remembered across a scale's stop -> start
    ended_at: datetime | None = None  # when the latest run ended, if it has


@dataclass(frozen=True)
class Decision:
    action: Action
    desired_workers: int
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def restart_delay_s(failures: int, s: ControlSettings) -> float:
    """Exponential back-off: base, 2x base, 4x base... capped at restart_max_delay_s."""
    return float(min(s.restart_max_delay_s, s.restart_base_delay_s * 2 ** max(0, failures - 1)))


def decide(obs: Observation, job: JobView, s: ControlSettings, now: datetime) -> Decision:
    """Keep the job alive first, then size it.

    Scale up fast (utilization near 1, or a growing backlog older than backlog_age_up_s), scale
    down slowly (down_periods low datapoints in a row, one worker at a time), never within
    cooldown_s of a (re)start, always within [min_workers, max_workers]. Between the down and up
    thresholds nothing happens (hysteresis), so a metric flapping around one threshold does not
    make the job flap.
    """
    inputs = {
        "state": job.state,
        "workers": job.workers,
        "utilization": list(obs.utilization)[-6:],
        "backlog_age_s": list(obs.backlog_age_s)[-6:],
        "consecutive_failures": job.consecutive_failures,
        "paused": job.paused,
    }
    current = job.workers or job.desired_workers or s.min_workers
    keep = _clamp(job.desired_workers or current, s)

    if job.paused:
        return Decision("none", keep, "paused by an operator (stop); 'start' resumes", inputs)
    if job.state == "STOPPING":
        return Decision("wait", keep, "the run is stopping; start once it has stopped", inputs)
    if job.state in FAILED:
        if job.consecutive_failures > s.max_restarts:
            return Decision(
                "alarm",
                keep,
                f"{job.consecutive_failures} failed runs in a row > max_restarts={s.max_restarts}",
                inputs,
            )
        delay = restart_delay_s(job.consecutive_failures, s)
        if job.last_failure_at and now < job.last_failure_at + timedelta(seconds=delay):
            until = (job.last_failure_at + timedelta(seconds=delay)).isoformat()
            return Decision(
                "wait", keep, f"back-off after failure {job.consecutive_failures}: restart at {until}", inputs
            )
        return Decision("restart", keep, f"run failed ({job.state}); restart {job.consecutive_failures}", inputs)
    if job.state == "EXPIRED" and job.ended_at and now < job.ended_at + timedelta(seconds=MAINTENANCE_RESTART_GRACE_S):
        return Decision("wait", keep, "Glue maintenance restart (run EXPIRED): Glue starts the next run", inputs)
    if job.state not in ACTIVE:
        return Decision("start", keep, f"no active run (latest: {job.state}); starting", inputs)

    if s.scaling_mode == "glue-auto-scaling":
        return Decision("none", current, f"Glue auto scaling manages workers up to {s.max_workers}", inputs)
    if s.worker_mb_s > 0:
        return _size_by_need(obs, job, current, s, now, inputs)
    if job.started_at and now < job.started_at + timedelta(seconds=s.cooldown_s):
        return Decision("none", current, f"cool-down: run started less than {s.cooldown_s}s ago", inputs)

    util = list(obs.utilization)
    ages = list(obs.backlog_age_s)
    if not util:
        return Decision("none", current, "no utilization datapoints: holding the current size", inputs)

    latest = util[-1]
    backlog_growing = len(ages) >= 3 and ages[-1] >= s.backlog_age_up_s and ages[-1] > ages[-2] > ages[-3]
    sustained_high = len(util) >= 2 and min(util[-2:]) >= s.scale_up_utilization
    if latest >= 1.0 or sustained_high or backlog_growing:
        grow = max(current + 1, math.ceil(current * max(latest, s.target_utilization) / s.target_utilization))
        if backlog_growing:
            grow = max(grow, current * 2)
        desired = _clamp(grow, s)
        why = (
            f"backlog age {ages[-1]:.0f}s >= {s.backlog_age_up_s:.0f}s and growing"
            if backlog_growing
            else f"utilization {latest:.2f} at or near capacity (up threshold {s.scale_up_utilization})"
        )
        if desired == current:
            return Decision("none", current, f"{why}, but already at max_workers={s.max_workers}", inputs)
        return Decision("scale", desired, f"scale up {current} -> {desired}: {why}", inputs)

    recent = util[-s.down_periods :]
    calm = not ages or ages[-1] < s.backlog_age_up_s / 2
    if len(recent) >= s.down_periods and max(recent) <= s.scale_down_utilization and calm:
        desired = _clamp(current - 1, s)
        if desired < current:
            return Decision(
                "scale",
                desired,
                f"scale down {current} -> {desired}: utilization <= {s.scale_down_utilization} "
                f"for {s.down_periods} datapoints",
                inputs,
            )
        return Decision("none", current, f"utilization low, already at min_workers={s.min_workers}", inputs)
    return Decision("none", current, f"utilization {latest:.2f} within the hysteresis band", inputs)


def need(obs: Observation, s: ControlSettings, *, resizing: bool) -> tuple[int, str]:
    """Workers that process what must be processed: the arrival rate, and the waiting backlog within
    the time the SLA leaves (minus the resize's dead time when ``resizing``), at the target
    utilization; plus the driver, which processes nothing."""
    per_worker = s.worker_mb_s * 1e6 * s.need_utilization
    recent = list(obs.arrival_bytes_per_s[-5:])
    arrival = sum(recent) / len(recent) if recent else 0.0
    # what a job keeping up holds anyway (the batch in flight and the next trigger's) is not backlog
    backlog = max(0.0, (obs.backlog_bytes[-1] if obs.backlog_bytes else 0.0) - arrival * 2 * s.trigger_interval_s)
    age = obs.backlog_age_s[-1] if obs.backlog_age_s else 0.0
    dead = s.resize_cost_s if resizing else 0.0
    window = max(60.0, s.latency_sla_s - age - dead)
    required = arrival + (backlog + arrival * dead) / window
    executors = max(1, math.ceil(required / per_worker))
    why = (
        f"arrival {arrival / 1e6:.1f} MB/s + backlog {backlog / 1e6:.0f} MB (age {age:.0f}s) within {window:.0f}s "
        f"at {s.worker_mb_s:.0f} MB/s per worker x {s.need_utilization} -> {executors} executors"
    )
    return executors + 1, why


def _size_by_need(  # noqa: PLR0917
    obs: Observation, job: JobView, current: int, s: ControlSettings, now: datetime, inputs: dict[str, Any]
) -> Decision:
    """Size from what must be processed (see :func:`need`), not from one utilization reading.

    Up as soon as the current size cannot meet the SLA (within the cool-down too: an up after an up
    is not a reversal); down to the measured need (not one worker at a time) only after the
    cool-down, when the backlog is small and the need has stayed below the size for ``down_periods``
    minutes; never on stale data.
    """
    inputs |= {"backlog_bytes": list(obs.backlog_bytes)[-3:], "arrival_bytes_per_s": list(obs.arrival_bytes_per_s)[-5:]}
    if obs.data_age_s is None or obs.data_age_s > s.stale_after_s:
        return Decision("none", current, f"no fresh backlog datapoint (newest {obs.data_age_s}s old): holding", inputs)
    stay, why_stay = need(obs, s, resizing=False)
    if stay > current:
        target, why = need(obs, s, resizing=True)
        desired = _clamp(max(target, stay), s)
        if desired <= current:
            return Decision("none", current, f"{why_stay}, but already at max_workers={s.max_workers}", inputs)
        return Decision("scale", desired, f"scale up {current} -> {desired}: {why}", inputs)
    in_cooldown = job.started_at is not None and now < job.started_at + timedelta(seconds=s.cooldown_s)
    if in_cooldown:
        return Decision("none", current, f"{why_stay}; cool-down: no scale-down within {s.cooldown_s}s", inputs)
    history = list(obs.arrival_bytes_per_s)[-s.down_periods :]
    age = obs.backlog_age_s[-1] if obs.backlog_age_s else 0.0
    if len(history) < s.down_periods or age > s.latency_sla_s / 4:
        return Decision("none", current, f"{why_stay}: holding", inputs)
    # the need at the window's peak arrival, with room for the resize's dead time
    # with DOWN_MARGIN more than that peak: a size just under the load would have to grow back
    peak = Observation(
        backlog_age_s=obs.backlog_age_s,
        backlog_bytes=obs.backlog_bytes,
        arrival_bytes_per_s=[max(history) * DOWN_MARGIN],
    )
    down, why_down = need(peak, s, resizing=True)
    desired = _clamp(down, s)
    if desired < current:
        return Decision("scale", desired, f"scale down {current} -> {desired}: {why_down}", inputs)
    return Decision("none", current, f"{why_stay}: the size fits", inputs)


def _clamp(n: int, s: ControlSettings) -> int:
    return max(s.min_workers, min(s.max_workers, n))
