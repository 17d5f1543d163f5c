"""What the control plane should do: a pure function of metrics, job state and settings."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from contracts.intake import JOB_FILES_LIMIT, JOB_MAX_MANIFEST_BYTES
from lambdas.control_plane.settings import ControlSettings

Action = Literal["none", "start", "restart", "scale", "stop", "wait", "alarm"]
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


@dataclass(frozen=True)
class Observation:
    """Recent metric datapoints, oldest first (one per minute or per batch)."""

    utilization: Sequence[float] = ()
    backlog_age_s: Sequence[float] = ()
    backlog_bytes: Sequence[float] = ()  # data bytes the waiting manifests reference
    arrival_bytes_per_s: Sequence[float] = ()  # data bytes the manifest Lambda listed, per second, per settled minute
    data_age_s: float | None = None  # seconds since the newest backlog datapoint (None: unknown)
    worker_bytes_per_s: float | None = None  # learned from the job (None: settings.worker_mb_s)


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
    scaled_up_at: datetime | None = None  # the latest scale-up's decision (the state remembers it)


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
    if s.misconfigured:  # read some other way than given: every decision says so, until the stack is fixed
        inputs["misconfigured"] = "; ".join(s.misconfigured)
    current = job.workers or job.desired_workers or s.min_workers
    keep = _clamp(job.desired_workers or current, s)

    if job.paused:
        if job.state in ACTIVE:  # a start that raced the operator's stop, or one from the console
            return Decision(
                "stop", keep, f"a run is {job.state} while paused by an operator (stop): stopping it", inputs
            )
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


# The newest arrivals no settled minute counts yet (SETTLE_S, plus half a minute on average): the
# current arrival rate stands for them when the backlog is spread over its ages.
UNSETTLED_S = 90.0
# The shortest time a backlog is planned to drain in, even past its deadline (then: as fast as allowed).
MIN_WINDOW_S = 120.0
# The current size stays while it keeps every byte within the SLA at this share of its rate (a
# resize plans for need_utilization, lower: the band between is the hysteresis that keeps a size).
STAY_UTILIZATION = 0.95
# A scale-down must save, over this horizon, twice what its resize bills without processing.
PAYBACK_HORIZON_S = 3600.0
# No scale-down within this long of a scale-up: a load that rose (a ramp, a day's morning) and paused,
# or an up that drained a backlog, would otherwise come down after the cool-down and up again within
# the hour (issue 46: at most two reversals within an hour a day). What it costs is the larger size
# held that long, repaid by the resizes it saves (each bills its dead time and ages the backlog).
DOWN_AFTER_UP_S = 3600.0
# A batch planned at the bytes per trigger the job is started with lasts at most this share of the SLA,
# so a resize never waits long for the batch in flight; at least one manifest's bytes (1 GiB), and at
# most what the most manifests a trigger may take hold (the job's JOB_FILES_LIMIT of 1 GiB ones: the
# driver's bound on a batch's plan, whatever the run's size). A big run's batches so take a backlog
# in a few long batches rather than many of two triggers each: each batch costs the driver its fixed
# part (a 22 TB dump drained by 299 workers of 168 MB/s: 3 batches, not 7-8, and within the SLA,
# make autoscale's backfill; it was 20 s over with batches of at most 64 GiB or two triggers). Never
# under INTAKE_TRIGGERS triggers of the run's processing: the job counts manifests to the budget by
# their data bytes (``contracts.intake``); a count takes at least half the budget (one manifest more
# would pass it), so INTAKE_TRIGGERS = 2 keeps the intake at or above a trigger's processing whatever
# the manifests' sizes.
BATCH_SHARE = 0.25
MIN_BATCH_BYTES = 1024**3
INTAKE_TRIGGERS = 2


def arrival_rate(obs: Observation) -> float:
    """Bytes/s arriving: the mean of the newest three settled minutes."""
    recent = list(obs.arrival_bytes_per_s[-3:])
    return sum(recent) / len(recent) if recent else 0.0


def arrival_level(obs: Observation) -> float:
    """Bytes/s arriving, swings averaged out: the mean of the lookback's settled minutes (30 by
    default: a load that swings every few minutes comes back within it, a day's curve barely moves)."""
    minutes = list(obs.arrival_bytes_per_s)
    return sum(minutes) / len(minutes) if minutes else 0.0


def worker_rate(obs: Observation, s: ControlSettings) -> float:
    """Bytes/s one worker processes: learned from the job (observation.py), else ``worker_mb_s``."""
    return obs.worker_bytes_per_s or s.worker_mb_s * 1e6


def backlog_by_age(
    backlog: float, oldest_s: float, arrival: float, minutes: Sequence[float]
) -> list[tuple[float, float]]:
    """The waiting bytes as (age s, bytes), oldest first. The queue is first in, first out, so what
    waits is what arrived last: the newest unsettled seconds at ``arrival``, then each settled
    minute's arrivals (``minutes``, bytes/s, oldest first), each at its older edge, none older than
    the oldest waiting manifest; what no minute explains waits since ``oldest_s``."""
    chunks: list[tuple[float, float]] = []
    left, edge = backlog, 0.0
    for span, rate in [(UNSETTLED_S, arrival), *((60.0, r) for r in reversed(minutes))]:
        if left <= 0 or edge >= oldest_s:
            break
        edge = min(oldest_s, edge + span)
        take = min(left, rate * span)
        chunks.append((edge, take))
        left -= take
    if left > 0:
        chunks.append((oldest_s, left))
    return sorted(chunks, reverse=True)


MAX_EXECUTORS = 298  # Glue's 299 workers, less the driver


def need(
    obs: Observation,
    s: ControlSettings,
    *,
    resizing: bool,
    arrival: float | None = None,
    keep_up: float | None = None,
    utilization: float | None = None,
) -> tuple[int, str]:
    """Workers that keep every waiting byte within the SLA, at the target utilization, plus the
    driver (which processes nothing).

    Each waiting byte is due by the SLA less its age (less a trigger and a batch): the oldest bytes
    first (first in, first out), the processing must have cleared, within each deadline, every byte
    due by then; and it must keep up with ``keep_up`` bytes/s after (default: the arrival rate).
    ``resizing``: nothing is processed for ``resize_cost_s`` seconds first, while every byte ages and
    more arrive (at the arrival rate, which also stands for the newest, unsettled seconds)."""
    share = s.need_utilization if utilization is None else utilization
    per_worker = worker_rate(obs, s) * share
    rate = arrival_rate(obs) if arrival is None else arrival
    floor = rate if keep_up is None else keep_up
    backlog = obs.backlog_bytes[-1] if obs.backlog_bytes else 0.0
    age = obs.backlog_age_s[-1] if obs.backlog_age_s else 0.0
    chunks = backlog_by_age(backlog, age, rate, obs.arrival_bytes_per_s)
    dead = s.resize_cost_s if resizing else 0.0
    if dead:
        arriving = [(dead - m, rate * min(60.0, dead - m)) for m in range(0, math.ceil(dead), 60)]
        chunks = sorted([(a + dead, b) for a, b in chunks] + arriving, reverse=True)
    budget = s.latency_sla_s - 2 * s.trigger_interval_s
    required, due, window = floor, 0.0, budget
    for chunk_age, size in chunks:
        due += size
        if due / max(MIN_WINDOW_S, budget - chunk_age) > required:
            required, window = due / max(MIN_WINDOW_S, budget - chunk_age), max(MIN_WINDOW_S, budget - chunk_age)
    # a worker rate near zero (WorkerMbPerSecond 5e-324 is a value the template allows) makes the ratio
    # infinite: past Glue's largest size the need is that size, never an OverflowError every tick
    ratio = required / per_worker if per_worker > 0 else math.inf
    executors = max(1, math.ceil(ratio)) if ratio < MAX_EXECUTORS else MAX_EXECUTORS
    why = (
        f"arrival {rate / 1e6:.1f} MB/s{f' (keep up with {floor / 1e6:.1f})' if keep_up is not None else ''}, "
        f"backlog {backlog / 1e6:.0f} MB (oldest {age:.0f}s)"
        f"{f' after a {dead:.0f}s resize' if dead else ''}: {required / 1e6:.1f} MB/s within {window:.0f}s "
        f"at {worker_rate(obs, s) / 1e6:.1f} MB/s per worker x {share} -> {executors} executors"
    )
    return executors + 1, why


def batch_bytes(workers: int, obs: Observation, s: ControlSettings) -> int:
    """The bytes per trigger to start a run of ``workers`` with: a batch lasts at most BATCH_SHARE
    of the SLA, within the job's intake bounds, and never takes in less than INTAKE_TRIGGERS
    triggers of the run's processing."""
    per_s = (workers - 1) * worker_rate(obs, s)
    # at most what the most manifests a trigger may take hold (the job refuses a larger count)
    most = JOB_FILES_LIMIT * JOB_MAX_MANIFEST_BYTES
    planned = min(most, per_s * s.latency_sla_s * BATCH_SHARE)
    keep_up = min(most, per_s * s.trigger_interval_s * INTAKE_TRIGGERS)
    return int(max(MIN_BATCH_BYTES, keep_up, planned))


def _size_by_need(  # noqa: PLR0917
    obs: Observation, job: JobView, current: int, s: ControlSettings, now: datetime, inputs: dict[str, Any]
) -> Decision:
    """Size from what must be processed (see :func:`need`), not from one utilization reading.

    Never on stale data, nor on data from before the run started (the backlog a restart leaves is
    the run's to clear). Sized for the arrival level (:func:`arrival_level`, the lookback's mean),
    not for a recent peak: a swing above the size waits in the backlog, which the size catches up
    with once the swing passes, as long as every waiting byte stays within the SLA; a rise that
    lasts raises the level, and one too fast for the level to follow ages the backlog's bytes.
    Up as soon as the current size at STAY_UTILIZATION cannot keep every waiting byte within the
    SLA or keep up with the level (within the cool-down too: an up after an up is not a reversal),
    to the need at the level, or at the newest settled minute when higher (a rise the level has
    not caught up with), with the resize's dead time. Down only after the cool-down and with the
    backlog small, to the need at the level, or at the newest minutes' rate when higher (a load
    still rising), with the resize's dead time, and only when the workers saved over an hour repay
    twice what the resize bills without processing.
    """
    inputs |= {
        "backlog_bytes": list(obs.backlog_bytes)[-3:],
        "arrival_bytes_per_s": list(obs.arrival_bytes_per_s)[-5:],
        "worker_bytes_per_s": worker_rate(obs, s),
    }
    if obs.data_age_s is None:
        return Decision("none", current, "no fresh backlog datapoint (none in the minutes read): holding", inputs)
    if obs.data_age_s > s.stale_after_s:
        return Decision(
            "none", current, f"no fresh backlog datapoint (newest {obs.data_age_s:.0f} s old): holding", inputs
        )
    if job.started_at is not None and now - timedelta(seconds=obs.data_age_s) < job.started_at:
        return Decision("none", current, "no backlog datapoint from this run yet: holding", inputs)
    level = arrival_level(obs)
    stay, why_stay = need(obs, s, resizing=False, keep_up=level, utilization=STAY_UTILIZATION)
    if stay > current:
        # a rise the level has not caught up with yet: keep up with its newest minute at least, so
        # the first resize is not followed by a second one (each costs its dead time)
        newest = obs.arrival_bytes_per_s[-1] if obs.arrival_bytes_per_s else 0.0
        target, why = need(obs, s, resizing=True, keep_up=max(level, newest))
        desired = _clamp(max(target, stay), s)
        if desired <= current:
            return Decision("none", current, f"{why_stay}, but already at max_workers={s.max_workers}", inputs)
        return Decision("scale", desired, f"scale up {current} -> {desired}: {why}", inputs)
    in_cooldown = job.started_at is not None and now < job.started_at + timedelta(seconds=s.cooldown_s)
    if in_cooldown:
        return Decision("none", current, f"{why_stay}; cool-down: no scale-down within {s.cooldown_s}s", inputs)
    if job.scaled_up_at is not None and now < job.scaled_up_at + timedelta(seconds=DOWN_AFTER_UP_S):
        return Decision(
            "none", current, f"{why_stay}; no scale-down within {DOWN_AFTER_UP_S:.0f}s of the last scale-up", inputs
        )
    age = obs.backlog_age_s[-1] if obs.backlog_age_s else 0.0
    if len(obs.arrival_bytes_per_s) < s.down_periods or age > s.latency_sla_s / 4:
        return Decision("none", current, f"{why_stay}: holding", inputs)
    down, why_down = need(obs, s, resizing=True, keep_up=max(level, arrival_rate(obs)))
    desired = _clamp(down, s)
    if desired >= current:
        return Decision("none", current, f"{why_stay}: the size fits", inputs)
    saved, cost = (current - desired) * PAYBACK_HORIZON_S, current * s.resize_cost_s
    if saved < 2 * cost:
        return Decision(
            "none", current, f"{why_down}: {current} -> {desired} would not repay its resize within an hour", inputs
        )
    return Decision("scale", desired, f"scale down {current} -> {desired}: {why_down}", inputs)


def _clamp(n: int, s: ControlSettings) -> int:
    return max(s.min_workers, min(s.max_workers, n))
