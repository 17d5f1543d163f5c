"""``make autoscale``: the control plane's real ``decide()`` replayed against load traces.

A discrete-event model of the job, of CloudWatch as the control plane reads it, and of the control
plane's 2-minute loop. Every figure of the table follows from the assumptions below.

Assumptions (the numbers the model runs on):
- traces: bytes arriving per 10 s, seeded (``--seed``); objects of 3.5 MB on average (lognormal,
  sigma 0.6), Poisson counts. steady 38.9 MB/s (40,000 files/h); step 38.9 -> x3 at 1/3 of the trace;
  spike 100 -> 500 MB/s for one hour at 1/2; diurnal 97 MB/s x (1 + 0.6 sin); seed (a realistic day:
  200,000 files/h = 194 MB/s, x (1 + 0.3 sin) over 24 h, x a lognormal 5-minute noise of sigma 0.15);
  backfill 19.4 MB/s + 500 GB at once at 1/10; ramp 50 -> 400 MB/s linearly over 2 h from 1/4, back
  to 50 over the next 2 h.
- worker speeds (``--speeds``, 56, 0.74 and 168 MB/s): at the reference speed (``--worker-mb-s``,
  56 MB/s: 20 MB/s per core x 4 cores x 0.7, ``make sizing``) the traces run as listed, max
  ``--max-workers`` (20). Any other speed (0.74 MB/s: the seed job's own 1 GB per 2.5 min on 9
  executors) runs the traces scaled by (speed / reference) x (299 / max-workers) (0.198 for 0.74),
  max 299 workers: the traces need about 15x the reference's workers against a 15x higher ceiling.
  The policy is told the true speed.
- the manifest Lambda writes every 10 s what arrived, as manifests of at most 1 GiB / 1000 objects
  (1 GiB binds: ~306 objects of 3.5 MB), split evenly, and publishes BytesPerManifest per manifest,
  whether the job is up or not.
- the job: W workers = W - 1 executors (the driver processes nothing). A 30 s processing-time trigger,
  as Spark runs it: the first batch when the query starts, the next at the next multiple of 30 s, or at
  once when a batch overran. A batch takes the query's count of waiting manifests, oldest first
  (Spark's ``maxFilesPerTrigger``), the count as the job sets it (``contracts.intake``): when the run
  is up, the manifests that fit the run's bytes per trigger by their data bytes, then manifests of
  their median size (1 GiB when none wait); after each batch, a new count when the waiting ones ask
  for twice it while more wait than it takes, or it would take twice the budget (at most once a
  minute; the next trigger 2 s later, the query's restart). The control plane starts each run with
  ``batch_bytes()`` (150 s of its executors' work, 1 GiB to 10,000 GiB, never under two triggers' work), Glue
  auto scaling's run with that of max workers, hindsight's as the control plane would. A batch
  lasts 5 s + (20 s for a run's first, cold, batch) + bytes / (executors x speed). When
  a batch ends it publishes Utilization (duration / 30 s), BatchDuration, InputBytes and
  ProcessingDuration (the bytes / (executors x speed) part: its parallel stages); every 30 s while
  its driver is up (none while the run starts or after it ended) BacklogManifests,
  OldestBacklogAge and BacklogDataBytes (the exact data bytes waiting). Backlog age = now - creation
  of the oldest manifest not yet processed (the batch in flight included).
- a run: 90 s of start-up with nothing processed (state STARTING), then RUNNING. A stop is graceful:
  the batch in flight finishes, then the run is STOPPED (at once when no batch is in flight); a stop
  still running after 600 s is forced, the batch in flight lost (its manifests are redone).
- billing: per second per worker while a run is up (start-up and stop included), 1 minute minimum
  per run. Glue auto scaling bills its executors + the driver.
- CloudWatch as read: a datapoint is readable 60 s after it was published. The reader asks for
  60 s buckets (Maximum, Sum or Average, as ``observe()`` asks) over the 30-minute lookback, ending at
  the end of the current minute (the newest bucket partial), or, ``settled``, at the last minute that
  ended 60 s ago (the arrival and the rate learned are read so: a partial minute's Sum reads low).
  ``data_age_s`` = now - start of the newest OldestBacklogAge bucket.
- the control plane ticks every 120 s, 20 s into its minute (ticks at 20, 140, 260 s...), and within
  10 s of a run's end (the template's "Glue Job State Change" rule); it builds the Observation with
  the Lambda's own ``observe()`` (lambdas/control_plane/observation.py) and applies ``decide()``:
  "scale" remembers the size and stops the run; the tick on its end sees STOPPED and "start"s the
  remembered size (``JobView.desired_workers``) with the batch bound ``batch_bytes()`` gives. A
  resize so costs the batch in flight (at most ~150 s: the bound) + 90 s start-up + 20 s cold batch.
- the surge signal (``contracts.surge``): a 10 s flush of at least 256 MiB (the manifest Lambda's
  ``SurgeBytes``, per invocation in the real system; at most one signal per 30 s) reaches the
  control plane 10 s later (PutEvents, EventBridge, the Lambda's start, its reads). It lists the
  manifests (the data bytes are in their names) and, only when those of the last 120 s are more than
  max-workers' executors clear in 120 s (a dump: no steady load is over the ceiling), decides as a
  tick does on an observation that counts the manifests written since the newest readable backlog
  datapoint's minute began, and adds the last minute's writes as the newest arrival minute
  (``lambdas/control_plane/surge.py``: ``with_written``). Applied as a tick's decision (a graceful
  stop). No queue lag between the producers and the manifests: a dump is written as it arrives.
- Glue auto scaling (``SCALING_MODE=glue-auto-scaling``, one run, never stopped): every 10 s it wants
  the executors that would clear the waiting bytes in one trigger (1..max-1); executors asked for join
  60 s later (and speed up the rest of the batch in flight); executors above the want for 60 s in a
  row are released.
- every replay starts at t=0 with a warm run up for an hour (out of its cool-down), sized by the
  first 10 minutes' mean arrival at 85 % of a worker (hindsight: its own size), and no metric history.
- hindsight, whole day: the fewest constant workers keeping the backlog age <= the SLA (600 s) all
  trace long (binary search, the age falling as workers rise). Hindsight, per hour: hour by hour,
  knowing the load, the fewest workers keeping that hour within the SLA from the state the previous
  hours left, and leaving the next hour able to meet it (keeping the size, or resizing from a backlog
  younger than half the SLA); greedy, so an upper bound of the true optimum. A change of size costs a
  resize as the policy's (stop at the hour's first tick, the next tick starts the new size). When no
  size meets the SLA, the one with the lowest maximum age (max age and minutes over SLA show it).
- reversals: a resize opposite to the previous one within 15 minutes; "within 1 h": within an hour.
"""

from __future__ import annotations

import argparse
import bisect
import copy
import dataclasses
import itertools
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from contracts import metrics as M
from contracts.intake import (
    JOB_MAX_FILES,
    JOB_MAX_MANIFEST_BYTES,
    REPLAN_MIN_S,
    manifests_per_trigger,
    most_manifests,
    replanned,
)
from glue_processor.local.text import aligned
from lambdas.control_plane.decision import ACTIVE, Decision, JobView, Observation, batch_bytes, decide
from lambdas.control_plane.metrics_reader import SETTLE_S
from lambdas.control_plane.observation import observe
from lambdas.control_plane.settings import ControlSettings, load_settings
from lambdas.control_plane.surge import is_surge, lookback, with_written, written_in_window

STEP_S = 10.0  # the manifest Lambda's cadence; ages and workers are sampled at it
STEPS_PER_HOUR = int(3600 / STEP_S)
TICK_S = 120.0
TICK_OFFSET_S = 20.0
START_UP_S = 90.0
COLD_BATCH_S = 20.0
FORCED_STOP_S = 600.0
MIN_BILLED_S = 60.0
TRIGGER_S = 30.0
BATCH_FIXED_S = 5.0
INTAKE_BYTES = 16 * 1024**3
OBJECT_MB = 3.5
MANIFEST_BYTES = min(1024**3, 1000 * OBJECT_MB * 1e6)
PUBLICATION_DELAY_S = 60.0
EXECUTOR_START_S = 60.0
EXECUTOR_IDLE_S = 60.0
REVERSAL_S = 900.0
REVERSAL_HOUR_S = 3600.0
MAX_MANIFEST_BYTES = JOB_MAX_MANIFEST_BYTES  # the count's assumption when none wait
MAX_FILES_PER_TRIGGER = JOB_MAX_FILES  # raised by the control plane for a bound past it (most_manifests)
QUERY_RESTART_S = 2.0  # the query started again with a new count (stop between batches, start)
SIGNAL_BYTES = 256 * 1024**2  # the manifest Lambda signals an invocation that wrote this much (SurgeBytes)
SIGNAL_INTERVAL_S = 30.0  # at most once per this (per container: the model has one)
SURGE_LATENCY_S = 10.0  # from the manifests written to the control plane's decision on them
SLOW_MAX_WORKERS = 299
WARM_UTILIZATION = 0.85
T0 = datetime(2026, 11, 22, tzinfo=UTC)
MB = 1e6


# ================================================================ traces: bytes arriving per 10 s
def _poisson(rng: random.Random, lam: float) -> int:
    if lam > 50:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    k, p, limit = 0, 1.0, math.exp(-lam)
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _objects(rng: random.Random, mb_s: float, shape: Callable[[float], float], steps: int) -> list[float]:
    """Bytes per step of Poisson-many lognormal objects (mean 3.5 MB) at ``mb_s`` x ``shape(hour)``."""
    sigma = 0.6
    mu = math.log(OBJECT_MB) - sigma**2 / 2
    sd = OBJECT_MB * math.sqrt(math.exp(sigma**2) - 1)
    out = []
    for i in range(steps):
        n = _poisson(rng, mb_s / OBJECT_MB * STEP_S * shape(i * STEP_S / 3600))
        if n < 30:
            mb = sum(rng.lognormvariate(mu, sigma) for _ in range(n))
        else:  # the sum of many objects: normal
            mb = max(0.0, rng.gauss(n * OBJECT_MB, math.sqrt(n) * sd))
        out.append(mb * MB)
    return out


def _ramp(hours: float) -> Callable[[float], float]:
    """50 MB/s, from hours/4 linearly to 400 over 2 h and back over 2 h (a multiplier of 50)."""
    start = hours / 4

    def shape(h: float) -> float:
        x = h - start
        if x <= 0 or x >= 4:
            return 1.0
        return 1 + 7 * (x / 2 if x < 2 else (4 - x) / 2)

    return shape


def _noise(rng: random.Random, hours: float, sigma: float = 0.15) -> Callable[[float], float]:
    blocks = [rng.lognormvariate(-(sigma**2) / 2, sigma) for _ in range(int(hours * 12) + 1)]
    return lambda h: blocks[int(h * 12)]


def traces(hours: float, seed: int, scale: float = 1.0) -> dict[str, list[float]]:
    """Bytes arriving per 10 s step, per trace (each trace its own seeded generator)."""
    steps = int(hours * STEPS_PER_HOUR)

    def rng(name: str) -> random.Random:
        return random.Random(f"{seed}-{name}")  # noqa: S311 - reproducible load

    noise = _noise(rng("noise"), hours)
    day = lambda h: (1 + 0.3 * math.sin(2 * math.pi * (h / 24 - 0.25))) * noise(h)  # noqa: E731
    specs: dict[str, tuple[float, Callable[[float], float]]] = {
        "steady": (38.9, lambda h: 1.0),
        "step": (38.9, lambda h: 1.0 if h < hours / 3 else 3.0),
        "spike": (100.0, lambda h: 5.0 if hours / 2 <= h < hours / 2 + 1 else 1.0),
        "diurnal": (97.2, lambda h: 1 + 0.6 * math.sin(2 * math.pi * h / hours)),
        "seed": (194.4, day),
        "backfill": (19.4, lambda h: 1.0),
        "ramp": (50.0, _ramp(hours)),
    }
    out = {name: _objects(rng(name), mb_s, shape, steps) for name, (mb_s, shape) in specs.items()}
    out["backfill"][int(steps * 0.1)] += 500e9
    return {name: [b * scale for b in series] for name, series in out.items()}


# ================================================================ CloudWatch, as the reader sees it
_STATS: dict[str, Callable[[list[float]], float]] = {
    "Maximum": max,
    "Minimum": min,
    "Sum": sum,
    "Average": lambda v: sum(v) / len(v),
    "SampleCount": lambda v: float(len(v)),
}


@dataclass
class CloudWatch:
    """Datapoints as published, read back as ``CloudWatchReader`` reads them (a ``MetricsReader``)
    at the clock ``now``: 60 s buckets up to the end of the current minute, readable 60 s late."""

    now: float = 0.0
    delay_s: float = PUBLICATION_DELAY_S
    times: dict[str, list[float]] = field(default_factory=dict)
    values: dict[str, list[float]] = field(default_factory=dict)

    def put(self, name: str, t: float, value: float) -> None:
        self.times.setdefault(name, []).append(t)
        self.values.setdefault(name, []).append(value)

    def points(
        self, name: str, *, minutes: int, stat: str = "Maximum", settled: bool = False
    ) -> list[tuple[float, float]]:
        # as CloudWatchReader: settled, whole minutes ended SETTLE_S ago; else up to the current one's end
        end = math.floor((self.now - SETTLE_S) / 60) * 60 if settled else math.floor(self.now / 60) * 60 + 60
        ts, vs = self.times.get(name, []), self.values.get(name, [])
        lo = bisect.bisect_left(ts, end - minutes * 60)
        hi = bisect.bisect_right(ts, self.now - self.delay_s)
        buckets: dict[float, list[float]] = {}
        for i in range(lo, hi):
            if ts[i] < end:
                buckets.setdefault(math.floor(ts[i] / 60) * 60, []).append(vs[i])
        return [(b, _STATS[stat](v)) for b, v in sorted(buckets.items())]

    def series(
        self,
        name: str,
        *,
        minutes: int,
        stat: str = "Maximum",
        dimensions: dict[str, str] | None = None,
        settled: bool = False,
    ) -> list[float]:
        return [v for _, v in self.points(name, minutes=minutes, stat=stat, settled=settled)]

    def age_s(self, name: str, *, minutes: int) -> float | None:
        points = self.points(name, minutes=minutes)
        return self.now - points[-1][0] if points else None


@dataclass
class Listing:
    """The manifest prefix as ``S3ManifestListing`` lists it: each manifest's write time and data bytes."""

    now: float = 0.0
    times: list[float] = field(default_factory=list)
    sizes: list[float] = field(default_factory=list)

    def put(self, t: float, size: float) -> None:
        self.times.append(t)
        self.sizes.append(size)

    def written_since(self, since: datetime, *, named_from: datetime | None = None) -> list[tuple[datetime, float]]:
        lo = bisect.bisect_right(self.times, (since - T0).total_seconds())
        hi = bisect.bisect_right(self.times, self.now)
        return [(T0 + timedelta(seconds=t), b) for t, b in zip(self.times[lo:hi], self.sizes[lo:hi], strict=True)]


# ================================================================ the job
@dataclass(frozen=True)
class Manifest:
    created: float
    size: float


@dataclass(frozen=True)
class Batch:
    start: float
    end: float
    manifests: int
    size: float = 0.0


@dataclass
class Run:
    workers: int
    started: float
    up_at: float
    up: bool = False
    batches: int = 0
    stop_deadline: float | None = None
    intake: float = INTAKE_BYTES  # the run's --max_bytes_per_trigger
    count: int = 1  # the query's manifests per trigger (contracts.intake, as glue_processor.intake sets it)
    counted_at: float = 0.0

    @property
    def executors(self) -> int:
        return self.workers - 1


@dataclass(frozen=True)
class Ended:
    """The latest run once it ended, as Glue's GetJobRuns reports it."""

    workers: int
    started: float
    ended: float
    state: str = "STOPPED"


def _next_trigger(t: float) -> float:
    return (math.floor(t / TRIGGER_S) + 1) * TRIGGER_S


@dataclass
class Job:
    """The Glue streaming job: runs, batches, the manifests waiting, billing, published metrics."""

    rate: float  # bytes/s one executor processes
    cw: CloudWatch | None = None
    waiting: deque[Manifest] = field(default_factory=deque)
    waiting_total: float = 0.0  # the data bytes the waiting manifests reference
    run: Run | None = None
    last: Ended | None = None
    batch: Batch | None = None
    next_trigger: float = math.inf
    next_publish: float = math.inf
    worker_seconds: float = 0.0
    billed_at: float = 0.0
    log: list[tuple[float, str]] = field(default_factory=list)  # (time, "start" | "up" | "stopped" | "forced")

    # -- commands
    def start(self, workers: int, now: float, *, warm: bool = False, intake: float | None = None) -> None:
        """Start a run; ``warm``: one already up for an hour (a replay's initial state); ``intake``:
        its bytes per trigger (default: the job's 16 GiB)."""
        self.run = Run(workers, now - 3600 if warm else now, now if warm else now + START_UP_S)
        self.run.intake = intake or INTAKE_BYTES
        self.billed_at = now
        self.log.append((now, "start"))
        if warm:
            self.run.batches = 1
            self._up(now)

    def request_stop(self, now: float) -> None:
        run = self.run
        if run is None or run.stop_deadline is not None:
            return
        if not run.up or self.batch is None:
            self._end(now, "stopped")
        else:
            run.stop_deadline = now + FORCED_STOP_S

    def add(self, manifests: Sequence[Manifest]) -> None:
        self.waiting.extend(manifests)
        self.waiting_total += sum(m.size for m in manifests)

    def set_executors(self, now: float, executors: int) -> None:
        """Glue auto scaling: executors join or leave the run; the batch in flight's remainder
        speeds up or slows down with them."""
        run, batch = self.run, self.batch
        if run is None:
            return
        self._bill(now)
        if batch is not None and batch.end > now:
            left = (batch.end - now) * max(1, run.executors) / max(1, executors)
            self.batch = Batch(batch.start, now + left, batch.manifests, batch.size)
        run.workers = executors + 1

    # -- what is seen from outside
    def view(self, now: float, desired: int | None) -> JobView:
        run, last = self.run, self.last
        if run is not None:
            state = "STARTING" if not run.up else "STOPPING" if run.stop_deadline is not None else "RUNNING"
            return JobView(state, run.workers, T0 + timedelta(seconds=run.started), desired_workers=desired)
        if last is not None:
            started, ended = (T0 + timedelta(seconds=x) for x in (last.started, last.ended))
            return JobView(last.state, last.workers, started, desired_workers=desired, ended_at=ended)
        return JobView("NONE", desired_workers=desired)

    def age(self, now: float) -> float:
        return now - self.waiting[0].created if self.waiting else 0.0

    def billed(self, now: float) -> float:
        """Worker-seconds billed up to ``now``."""
        return self.worker_seconds + (self.run.workers * (now - self.billed_at) if self.run else 0.0)

    def waiting_bytes(self) -> float:
        return self.waiting_total if self.waiting else 0.0

    # -- time
    def advance(self, until: float) -> None:
        """Process the job's events before ``until``, in time order."""
        while True:
            event = self._next_event()
            if event is None or event[0] >= until:
                return
            t, _, handle = event
            handle(t)

    def _next_event(self) -> tuple[float, int, Callable[[float], None]] | None:
        run = self.run
        if run is None:
            return None
        events: list[tuple[float, int, Callable[[float], None]]] = []
        if not run.up:
            events.append((run.up_at, 0, self._up))
        if self.batch is not None:
            events.append((self.batch.end, 1, self._batch_end))
            if run.stop_deadline is not None:
                events.append((run.stop_deadline, 2, self._force))
        elif run.up and run.stop_deadline is None:
            events.append((self.next_trigger, 3, self._trigger))
        if run.up:
            events.append((self.next_publish, 4, self._publish))
        return min(events, key=lambda e: (e[0], e[1]))

    def _up(self, t: float) -> None:
        assert self.run is not None
        self.run.up = True
        self.run.count = manifests_per_trigger(
            int(self.run.intake), self._sizes(), most=self._most(), unknown_size=MAX_MANIFEST_BYTES
        )
        self.run.counted_at = t
        self.next_trigger = self.next_publish = t
        self.log.append((t, "up"))

    def _most(self) -> int:
        assert self.run is not None
        return most_manifests(int(self.run.intake), MAX_FILES_PER_TRIGGER, MAX_MANIFEST_BYTES)

    def _sizes(self) -> list[int]:
        """The waiting manifests' data bytes, oldest first, as far as a count could reach."""
        return [int(m.size) for m in itertools.islice(self.waiting, self._most() + 1)]

    def _replan(self, t: float) -> None:
        """After a batch, as ``glue_processor.intake``: a new count when the waiting manifests ask for
        one, the query started again (QUERY_RESTART_S) between batches."""
        run = self.run
        assert run is not None
        if t - run.counted_at < REPLAN_MIN_S:
            return
        new = replanned(
            run.count, self._sizes(), budget=int(run.intake), most=self._most(), unknown_size=MAX_MANIFEST_BYTES
        )
        if new is not None:
            run.count, run.counted_at = new, t
            self.next_trigger = max(self.next_trigger, t + QUERY_RESTART_S)

    def _trigger(self, t: float) -> None:
        assert self.run is not None
        if not self.waiting:
            self.next_trigger = _next_trigger(t)
            return
        # Spark's file source: the query's count of manifests, oldest first
        n = min(self.run.count, len(self.waiting))
        size = sum(m.size for m in itertools.islice(self.waiting, n))
        cold = COLD_BATCH_S if self.run.batches == 0 else 0.0
        duration = BATCH_FIXED_S + cold + size / (max(1, self.run.executors) * self.rate)
        self.batch = Batch(t, t + duration, n, size)

    def _batch_end(self, t: float) -> None:
        assert self.run is not None
        assert self.batch is not None
        batch, self.batch = self.batch, None
        for _ in range(batch.manifests):
            self.waiting_total -= self.waiting.popleft().size
        self.run.batches += 1
        if self.cw is not None:
            self.cw.put(M.UTILIZATION.name, t, (t - batch.start) / TRIGGER_S)
            self.cw.put(M.BATCH_DURATION.name, t, (t - batch.start) * 1000)
            work = batch.size / (max(1, self.run.executors) * self.rate)
            self.cw.put(M.PROCESSING_DURATION.name, t, work * 1000)
            self.cw.put(M.INPUT_BYTES.name, t, batch.size)
        if self.run.stop_deadline is not None:
            self._end(t, "stopped")
        else:  # Spark: the next multiple of the trigger, or at once when the batch overran
            self.next_trigger = max(t, _next_trigger(batch.start))
            self._replan(t)

    def _force(self, t: float) -> None:
        self.batch = None  # lost: its manifests wait for the next run
        self._end(t, "forced")

    def _publish(self, t: float) -> None:
        if self.cw is not None:
            self.cw.put(M.BACKLOG_MANIFESTS.name, t, float(len(self.waiting)))
            self.cw.put(M.BACKLOG_AGE.name, t, self.age(t))
            self.cw.put(M.BACKLOG_DATA_BYTES.name, t, self.waiting_bytes())
        self.next_publish = t + TRIGGER_S

    def _end(self, t: float, why: str) -> None:
        run = self.run
        assert run is not None
        self._bill(t)
        self.worker_seconds += run.workers * max(0.0, MIN_BILLED_S - (t - run.started))
        self.last = Ended(run.workers, run.started, t)
        self.run, self.batch = None, None
        self.next_trigger = self.next_publish = math.inf
        self.log.append((t, why))

    def _bill(self, now: float) -> None:
        if self.run is not None:
            self.worker_seconds += self.run.workers * (now - self.billed_at)
        self.billed_at = now

    def fork(self) -> Job:
        twin = copy.copy(self)
        twin.waiting = deque(self.waiting)
        twin.run = copy.copy(self.run)
        twin.log = list(self.log)
        return twin


def write_manifests(job: Job, cw: CloudWatch | None, t: float, size: float, listing: Listing | None = None) -> None:
    """The manifest Lambda: what arrived in the last 10 s, as evenly split manifests of <= 1 GiB."""
    if size <= 0:
        return
    n = math.ceil(size / MANIFEST_BYTES)
    job.add([Manifest(t, size / n)] * n)
    if cw is not None:
        for _ in range(n):
            cw.put(M.BYTES_PER_MANIFEST.name, t, size / n)
    if listing is not None:
        listing.put(t, size)


@dataclass
class GlueAutoScaling:
    """Executors follow the waiting bytes within one run: asked for, they join 60 s later; above the
    want for 60 s in a row, they go."""

    max_executors: int
    asked: int = 0
    joining: deque[tuple[float, int]] = field(default_factory=deque)
    low_since: float | None = None

    def update(self, job: Job, t: float) -> None:
        run = job.run
        if run is None or not run.up:
            return
        if not self.asked:
            self.asked = run.executors
        want = min(self.max_executors, max(1, math.ceil(job.waiting_bytes() / (TRIGGER_S * job.rate))))
        while self.joining and self.joining[0][0] <= t:
            job.set_executors(t, run.executors + self.joining.popleft()[1])
        if want > self.asked:
            self.joining.append((t + EXECUTOR_START_S, want - self.asked))
            self.asked = want
        if want >= run.executors:
            self.low_since = None
            return
        self.low_since = t if self.low_since is None else self.low_since
        if t - self.low_since >= EXECUTOR_IDLE_S:
            self.joining.clear()
            self.asked = want
            self.low_since = None
            job.set_executors(t, want)

    def fork(self) -> GlueAutoScaling:
        return GlueAutoScaling(self.max_executors, self.asked, deque(self.joining), self.low_since)


# ================================================================ the control plane loop
class Controller(Protocol):
    def decide(self, view: JobView, now: float) -> Decision: ...

    def surge(self, view: JobView, now: float) -> Decision | None:
        """On the manifest Lambda's surge signal: a decision when the listing shows a surge."""
        ...

    def intake(self, workers: int) -> float | None:
        """The bytes per trigger a run of ``workers`` starts with (None: the job's default)."""
        ...

    def fork(self) -> Controller: ...


@dataclass
class Policy:
    """The real ``decide()`` on what CloudWatch returns at the tick."""

    s: ControlSettings
    cw: CloudWatch
    listing: Listing | None = None  # the manifest prefix (None: no surge signal)
    remembered: float | None = None  # the learned rate, as the Lambda's state object keeps it
    observed: Observation = field(default_factory=Observation)

    def decide(self, view: JobView, now: float, *, written: Sequence[tuple[datetime, float]] | None = None) -> Decision:
        self.cw.now = now
        at = T0 + timedelta(seconds=now)
        running = view.workers if view.state == "RUNNING" else None
        obs = observe(
            self.cw, self.s, workers=running, running_since=view.started_at, now=at, remembered_rate=self.remembered
        )
        if written is not None:
            obs = with_written(obs, written, at)
        self.observed = obs
        self.remembered = obs.worker_bytes_per_s
        return decide(obs, view, self.s, at)

    def surge(self, view: JobView, now: float) -> Decision | None:
        """As ``ControlPlane.surge``: one listing, the decision only on a surge."""
        if self.listing is None or self.s.scaling_mode != "control-plane":
            return None
        self.listing.now = now
        at = T0 + timedelta(seconds=now)
        listed = self.listing.written_since(at - lookback(self.s))
        written = written_in_window(listed, at)
        if not is_surge(written, Observation(worker_bytes_per_s=self.remembered), self.s):
            return None
        return self.decide(view, now, written=listed)

    def intake(self, workers: int) -> float | None:
        # Glue auto scaling: one run, started with the bound of the most workers it may grow to
        most = workers if self.s.scaling_mode == "control-plane" else self.s.max_workers
        return float(batch_bytes(most, self.observed, self.s)) if self.s.worker_mb_s > 0 else None

    def fork(self) -> Policy:
        return self  # replays with a policy are never forked


@dataclass
class Plan:
    """Hindsight: the size of each hour, known in advance, applied like the control plane would."""

    sizes: list[int]
    s: ControlSettings | None = None  # the control plane's settings: each run's batch bound (None: the job's)

    def decide(self, view: JobView, now: float) -> Decision:
        want = self.sizes[min(int(now // 3600), len(self.sizes) - 1)]
        if view.state == "STOPPING":
            return Decision("wait", want, "stopping")
        if view.state not in ACTIVE:
            return Decision("start", view.desired_workers or want, "start")
        if view.workers != want:
            return Decision("scale", want, "the hour's size")
        return Decision("none", want, "the hour's size")

    def surge(self, view: JobView, now: float) -> Decision | None:
        return None  # the hour's size is known in advance

    def intake(self, workers: int) -> float | None:
        # started as the control plane starts a run (hindsight knows the true speed)
        return float(batch_bytes(workers, Observation(), self.s)) if self.s is not None else None

    def fork(self) -> Plan:
        return Plan(list(self.sizes), self.s)


@dataclass
class Replay:
    """One trace through the job, the manifest Lambda, CloudWatch and a controller, step by step."""

    name: str
    job: Job
    controller: Controller
    cw: CloudWatch | None = None
    autoscaler: GlueAutoScaling | None = None
    listing: Listing | None = None
    step: int = 0
    signalled: float = -math.inf  # the manifest Lambda's latest surge signal
    surge_at: float | None = None  # when the control plane decides on it
    signals: int = 0  # surge signals the control plane received
    surges: int = 0  # ... that it decided on (the listing showed a surge)
    next_tick: float = TICK_OFFSET_S
    desired: int | None = None
    ages: list[float] = field(default_factory=list)
    workers: list[int] = field(default_factory=list)
    actions: int = 0
    restarts: int = 0
    reversals: int = 0
    reversals_hour: int = 0  # opposite to the previous resize within an hour
    last_scale: tuple[float, int] | None = None
    scaled_up_at: float | None = None
    seen_end: Ended | None = None  # the latest run end a tick has seen

    def run_to(self, trace: Sequence[float], step: int) -> Replay:
        """Advance to ``step`` (``trace[i]`` arrives during step i + 1)."""
        while self.step < min(step, len(trace)):
            self.step += 1
            t = self.step * STEP_S
            self.job.advance(t)
            write_manifests(self.job, self.cw, t, trace[self.step - 1], self.listing)
            if self._signals(t, trace[self.step - 1]):
                self.signalled, self.surge_at = t, t + SURGE_LATENCY_S
            if self.autoscaler is not None:
                self.autoscaler.update(self.job, t)
            self.ages.append(self.job.age(t))
            self.workers.append(self.job.run.workers if self.job.run else 0)
            if self.surge_at is not None and t >= self.surge_at:
                self.surge_at, self.signals = None, self.signals + 1
                view = self._view(t)
                surged = self.controller.surge(view, t)
                if surged is not None:
                    self.surges += 1
                    self._apply(t, view, surged)
            if t >= self.next_tick:
                self.next_tick += TICK_S
                self._tick(t)
            elif self.job.run is None and self.job.last is not self.seen_end:
                self.seen_end = self.job.last  # the job-state-change rule: a tick when a run ends
                self._tick(t)
        return self

    def _signals(self, t: float, written: float) -> bool:
        """Whether the manifest Lambda sends a surge signal for this flush (``SurgeSignal``)."""
        quiet = t - self.signalled >= SIGNAL_INTERVAL_S and self.surge_at is None
        return self.listing is not None and written >= SIGNAL_BYTES and quiet

    def _view(self, t: float) -> JobView:
        """The job as a tick sees it, with the latest scale-up the control plane's state remembers."""
        view = self.job.view(t, self.desired)
        if self.scaled_up_at is None:
            return view
        return dataclasses.replace(view, scaled_up_at=T0 + timedelta(seconds=self.scaled_up_at))

    def _tick(self, t: float) -> None:
        view = self._view(t)
        self._apply(t, view, self.controller.decide(view, t))

    def _apply(self, t: float, view: JobView, d: Decision) -> None:
        if d.action in ("start", "restart") and self.job.run is None:
            self.job.start(d.desired_workers, t, intake=self.controller.intake(d.desired_workers))
            self.restarts += 1
        elif d.action == "scale" and d.desired_workers != view.workers:
            direction = 1 if d.desired_workers > (view.workers or 0) else -1
            if self.last_scale and self.last_scale[1] == -direction and t - self.last_scale[0] <= REVERSAL_S:
                self.reversals += 1
            if self.last_scale and self.last_scale[1] == -direction and t - self.last_scale[0] <= REVERSAL_HOUR_S:
                self.reversals_hour += 1
            self.last_scale = (t, direction)
            if direction > 0:
                self.scaled_up_at = t
            self.actions += 1
            self.desired = d.desired_workers
            self.job.request_stop(t)

    @property
    def worker_hours(self) -> float:
        return self.job.billed(self.step * STEP_S) / 3600

    def fork(self, name: str | None = None) -> Replay:
        twin = copy.copy(self)
        twin.name = name or self.name
        twin.job = self.job.fork()
        twin.controller = self.controller.fork()
        twin.autoscaler = self.autoscaler.fork() if self.autoscaler else None
        twin.ages, twin.workers = list(self.ages), list(self.workers)
        return twin


def warm_size(trace: Sequence[float], s: ControlSettings) -> int:
    """The size a job already running for the first 10 minutes' load would have."""
    mean = sum(trace[:60]) / max(1, len(trace[:60])) / STEP_S
    executors = math.ceil(mean / (s.worker_mb_s * MB * WARM_UTILIZATION))
    return max(s.min_workers, min(s.max_workers, executors + 1))


def replay_policy(
    trace: Sequence[float], s: ControlSettings, name: str, true_mb_s: float | None = None, *, surges: bool = True
) -> Replay:
    """The control plane (``s.scaling_mode``) on the trace, with CloudWatch in between; the workers
    process ``true_mb_s`` (default: ``s.worker_mb_s``, the setting right)."""
    cw = CloudWatch()
    job = Job((true_mb_s or s.worker_mb_s) * MB, cw)
    auto = GlueAutoScaling(s.max_workers - 1) if s.scaling_mode == "glue-auto-scaling" else None
    listing = Listing() if surges else None
    policy = Policy(s, cw, listing)
    first = warm_size(trace, s)
    job.start(first, 0.0, warm=True, intake=policy.intake(first))  # started by the control plane too
    return Replay(name, job, policy, cw, auto, listing).run_to(trace, len(trace))


def planned(s: ControlSettings, first: int, name: str) -> Replay:
    job = Job(s.worker_mb_s * MB)
    plan = Plan([first], s)
    job.start(first, 0.0, warm=True, intake=plan.intake(first))
    return Replay(name, job, plan)


# ================================================================ hindsight
def _lowest(ok: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """The lowest n in [lo, hi] with ok(n), ok rising with n; None when not even ok(hi)."""
    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def whole_day(trace: Sequence[float], s: ControlSettings) -> Replay | None:
    """The fewest constant workers keeping the backlog age within the SLA all trace long."""
    runs: dict[int, Replay] = {}

    def ok(w: int) -> bool:
        runs[w] = planned(s, w, f"whole-day {w}").run_to(trace, len(trace))
        return max(runs[w].ages) <= s.latency_sla_s

    best = _lowest(ok, s.min_workers, s.max_workers)
    return runs[best] if best is not None else None


@dataclass
class _Hour:
    """One hour's candidate sizes, each replayed from where the previous hours left the job."""

    trace: Sequence[float]
    s: ControlSettings
    base: Replay | None
    hour: int
    tries: dict[int, Replay] = field(default_factory=dict)
    ahead: dict[int, bool] = field(default_factory=dict)

    @property
    def end(self) -> int:
        return min(len(self.trace), (self.hour + 1) * STEPS_PER_HOUR)

    @property
    def previous(self) -> int | None:
        return self.base.controller.sizes[-1] if self.base and isinstance(self.base.controller, Plan) else None

    def attempt(self, w: int) -> Replay:
        if w not in self.tries:
            r = planned(self.s, w, "hindsight per hour") if self.base is None else self.base.fork()
            if self.base is not None and isinstance(r.controller, Plan):
                r.controller.sizes.append(w)
            self.tries[w] = r.run_to(self.trace, self.end)
        return self.tries[w]

    def worst(self, w: int) -> float:
        return max(self.attempt(w).ages[self.hour * STEPS_PER_HOUR :])

    def fits(self, w: int) -> bool:
        return self.worst(w) <= self.s.latency_sla_s

    def recovers(self, w: int) -> bool:
        """Whether the next hour can still meet the SLA after this one at ``w``: keeping ``w``, or
        resizing (to max workers) from a backlog younger than half the SLA. A greedy pick must not
        leave a backlog that only a resize, itself adding minutes to the age, could catch up with."""
        if self.end >= len(self.trace):
            return True
        if w not in self.ahead:
            after = _Hour(self.trace, self.s, self.attempt(w), self.hour + 1)
            young = self.attempt(w).ages[-1] <= self.s.latency_sla_s / 2
            self.ahead[w] = after.fits(w) or (young and after.fits(self.s.max_workers))
        return self.ahead[w]

    def pick(self) -> int:
        """The cheapest size meeting the SLA this hour without leaving the next hour lost, else
        meeting it this hour only (the previous size needs no resize); else the lowest maximum age."""
        for test in (lambda w: self.fits(w) and self.recovers(w), self.fits):
            best = _lowest(test, self.s.min_workers, self.s.max_workers)
            fitting = [w for w in {best, self.previous} if w is not None and test(w)]
            if fitting:
                return min(fitting, key=lambda w: (self.attempt(w).job.billed(self.end * STEP_S), w))
        return min({self.s.max_workers, self.previous or self.s.max_workers}, key=lambda w: (self.worst(w), w))


def per_hour(trace: Sequence[float], s: ControlSettings) -> Replay:
    """Hour by hour, the fewest workers keeping the hour within the SLA, a change costing a resize."""
    base: Replay | None = None
    for hour in range(math.ceil(len(trace) / STEPS_PER_HOUR)):
        search = _Hour(trace, s, base, hour)
        base = search.attempt(search.pick())
    assert base is not None
    return base


# ================================================================ report
@dataclass(frozen=True)
class Speed:
    worker_mb_s: float
    max_workers: int
    scale: float  # the traces' bytes are multiplied by this

    @property
    def label(self) -> str:
        return f"{self.worker_mb_s:g} MB/s per worker, max {self.max_workers} workers, traces x {self.scale:.3g}"


def speeds(values: str, reference_mb_s: float, reference_max: int) -> list[Speed]:
    out = []
    for v in (float(x) for x in values.split(",") if x.strip()):
        if v == reference_mb_s:
            out.append(Speed(v, reference_max, 1.0))
        else:
            out.append(Speed(v, SLOW_MAX_WORKERS, v / reference_mb_s * SLOW_MAX_WORKERS / reference_max))
    return out


HEADERS = [
    "trace",
    "policy",
    "worker-h",
    "after 1 h",
    "/ per-hour",
    "/ whole-day",
    "max age s",
    "min over SLA",
    "actions",
    "restarts",
    "reversals",
    "within 1 h",
]


def row(trace: str, label: str, r: Replay | None, hourly: Replay, day: Replay | None, sla: float) -> list[str]:
    if r is None:
        return [trace, label, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"]
    over = sum(STEP_S for a in r.ages if a > sla) / 60
    return [
        trace,
        label,
        f"{r.worker_hours:.1f}",
        f"{sum(r.workers[STEPS_PER_HOUR:]) * STEP_S / 3600:.1f}",
        f"{r.worker_hours / hourly.worker_hours:.2f}",
        f"{r.worker_hours / day.worker_hours:.2f}" if day else "-",
        f"{max(r.ages):.0f}",
        f"{over:.0f}",
        str(r.actions),
        str(r.restarts),
        str(r.reversals),
        str(r.reversals_hour),
    ]


def table(rows: list[list[str]]) -> str:
    return aligned(HEADERS, rows, left=2)


def plot(name: str, runs: list[Replay], arrivals: Sequence[float], s: ControlSettings, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 7), sharex=True)
    hours = [(i + 1) * STEP_S / 3600 for i in range(len(runs[0].ages))]
    per_min = [sum(arrivals[i : i + 6]) / 60 / MB for i in range(0, len(hours), 6)]
    axes[0].plot(hours[::6], per_min, lw=0.8)
    axes[0].set_ylabel("arrivals MB/s")
    for r in runs:
        axes[1].plot(hours, r.workers, label=r.name, lw=1)
        axes[2].plot(hours, r.ages, label=r.name, lw=1)
    axes[1].set_ylabel("workers")
    axes[2].axhline(s.latency_sla_s, color="red", ls="--", lw=0.8, label="SLA")
    axes[2].set_ylabel("backlog age s")
    axes[2].set_xlabel("hours")
    axes[1].legend(fontsize=7)
    axes[2].legend(fontsize=7)
    fig.suptitle(f"autoscale: {name}")
    fig.tight_layout()
    fig.savefig(out / f"autoscale-{name}.png", dpi=80)
    plt.close(fig)


def report(speed: Speed, args: argparse.Namespace, reference: bool) -> str:
    base = {"job_name": "sim", "min_workers": 2, "max_workers": speed.max_workers, "worker_mb_s": speed.worker_mb_s}
    s = load_settings(**base)
    auto = load_settings(**base, scaling_mode="glue-auto-scaling")
    wanted = set(filter(None, args.traces.split(",")))
    rows = []
    for name, trace in traces(args.hours, args.seed, speed.scale).items():
        if wanted and name not in wanted:
            continue
        hourly, day = per_hour(trace, s), whole_day(trace, s)
        runs = [replay_policy(trace, s, "need (decide)"), replay_policy(trace, auto, "glue auto scaling")]
        # WORKER_MB_S set 3x off: the job's real speed stays speed.worker_mb_s
        mis_set = [
            replay_policy(
                trace, load_settings(**base | {"worker_mb_s": speed.worker_mb_s * k}), label, speed.worker_mb_s
            )
            for k, label in ((1 / 3, "need, WORKER_MB_S / 3"), (3.0, "need, WORKER_MB_S x 3"))
        ]
        hourly.name = "hindsight per hour"
        rows += [row(name, r.name, r, hourly, day, s.latency_sla_s) for r in [*runs, *mis_set, hourly]]
        rows.append(row(name, "hindsight whole day", day, hourly, day, s.latency_sla_s))
        args.docs.mkdir(parents=True, exist_ok=True)
        plot(name if reference else f"{name}-{speed.worker_mb_s:g}mbs", [*runs, hourly], trace, s, args.docs)
    return f"{speed.label}, {args.hours:g} h per trace, SLA {s.latency_sla_s:g} s\n{table(rows)}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="autoscale", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--hours", type=float, default=24)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--worker-mb-s", type=float, default=56.0, help="the reference speed: traces as listed")
    p.add_argument("--max-workers", type=int, default=20, help="max workers at the reference speed")
    p.add_argument("--speeds", default="56,0.74,168", help="comma-separated MB/s per worker")
    p.add_argument("--docs", type=Path, default=Path("docs"))
    p.add_argument("--traces", default="", help="comma-separated subset")
    args = p.parse_args(argv)
    for speed in speeds(args.speeds, args.worker_mb_s, args.max_workers):
        print(report(speed, args, reference=speed.worker_mb_s == args.worker_mb_s), end="\n\n")
    print((__doc__ or "")[(__doc__ or "").index("Assumptions") :])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
