"""``make autoscale``: the control plane replayed against load traces, in a discrete-time model.

The model (assumptions, calibrated where measured):
- a worker processes ``--worker-mb-s`` data MB/s (default 56: 20 MB/s per core, a middle data shape of
  ``make bench``, x 4 cores of G.1X x 0.7 scaling efficiency, ``make sizing``); the driver
  processes nothing, so W workers are W-1 executors;
- a 30 s processing-time trigger; a batch takes what waits (up to 16 GiB) and lasts 5 s + bytes over
  the executors' rate; the job publishes Utilization when a batch ends and BacklogAge/BacklogBytes
  every minute, and CloudWatch returns a datapoint 60 s after its minute (publication delay);
- the control plane runs every 2 minutes on what CloudWatch returns (per-minute Maximum, 30-minute
  lookback) through the real ``decide()``;
- a resize is a graceful stop (the running batch finishes) plus 90 s of start-up, nothing processed;
- Glue bills per second per worker while a run is up, with a 1-minute minimum per run;
- Glue auto scaling (``SCALING_MODE=glue-auto-scaling``): executors follow the pending work within
  the run (a minute to add one, removed after a minute idle), between min and max, no restart.

The hindsight minimum is the fewest workers that, held constant all trace long, keep the backlog age
under the SLA (found by replaying each size); its worker-hours are that size x the trace's length.
A policy that follows the load can do better than it (ratio < 1) on traces whose load falls.
"""

from __future__ import annotations

import argparse
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lambdas.control_plane.decision import JobView, Observation, decide
from lambdas.control_plane.settings import ControlSettings, load_settings

DT = 10.0  # seconds per step
TRIGGER_S = 30.0
BATCH_FIXED_S = 5.0
MAX_BATCH_BYTES = 16 * 1024**3
PUBLICATION_DELAY_S = 60.0
TICK_S = 120.0
START_UP_S = 90.0
T0 = datetime(2026, 11, 22, tzinfo=UTC)
MB = 1e6


# ---------------------------------------------------------------- traces: bytes arriving per step
def _poisson_files(rng: random.Random, files_per_h: float, mean_mb: float, steps: int, shape: Callable[[int], float]):
    out = []
    for i in range(steps):
        lam = files_per_h / 3600 * DT * shape(i)
        n = _poisson(rng, lam)
        sigma = 0.6
        mu = math.log(mean_mb) - sigma**2 / 2
        out.append(sum(rng.lognormvariate(mu, sigma) for _ in range(n)) * MB if n < 5000 else n * mean_mb * MB)
    return out


def _poisson(rng: random.Random, lam: float) -> int:
    if lam > 50:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    k, p, limit = 0, 1.0, math.exp(-lam)
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def traces(hours: float, seed: int) -> dict[str, list[float]]:
    """Bytes arriving per step, per trace."""
    steps = int(hours * 3600 / DT)
    rng = random.Random(seed)  # noqa: S311 - reproducible load
    h = lambda i: i * DT / 3600  # noqa: E731
    diurnal = lambda i: 1 + 0.3 * math.sin(2 * math.pi * (h(i) / 24 - 0.25))  # noqa: E731
    seed_load = 200_000  # files/h of ~3.5 MB: ~194 MB/s
    out = {
        "steady": _poisson_files(rng, 40_000, 3.5, steps, lambda i: 1.0),
        "step": _poisson_files(rng, 40_000, 3.5, steps, lambda i: 1.0 if h(i) < hours / 3 else 3.0),
        "spike": _poisson_files(rng, 40_000, 3.5, steps, lambda i: 6.0 if hours / 2 <= h(i) < hours / 2 + 0.25 else 1),
        "diurnal": _poisson_files(rng, 100_000, 3.5, steps, lambda i: 1 + 0.6 * math.sin(2 * math.pi * h(i) / hours)),
        "seed": _poisson_files(rng, seed_load, 3.5, steps, diurnal),
    }
    backfill = _poisson_files(rng, 20_000, 3.5, steps, lambda i: 1.0)
    backfill[int(steps * 0.1)] += 500e9  # 500 GB at once, then drain
    out["backfill"] = backfill
    return out


# ---------------------------------------------------------------- the job and the control plane
@dataclass
class Result:
    name: str
    worker_seconds: float = 0.0
    ages: list[float] = field(default_factory=list)  # backlog age at every step
    workers: list[int] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    actions: int = 0
    restarts: int = 0
    dead_s: float = 0.0
    reversals: int = 0

    @property
    def worker_hours(self) -> float:
        return self.worker_seconds / 3600


def simulate(
    arrivals: list[float],
    s: ControlSettings,
    *,
    mode: str = "control-plane",
    fixed: int | None = None,
    name: str = "",
    worker_mb_s: float = 56.0,
) -> Result:
    """Replay ``arrivals`` through the job model with the control plane's ``s`` (``fixed``: no control
    plane, that many workers; ``worker_mb_s``: what a worker of the modelled job processes)."""
    res = Result(name, arrivals=arrivals)
    rate = worker_mb_s * MB
    waiting: deque[list[float]] = deque()  # [arrival time, bytes] not yet in a finished batch
    workers = fixed or s.min_workers
    executors = float(workers - 1)
    up_at = 0.0  # the run processes from this time
    batch_end: float | None = None
    batch_start = 0.0
    batch_bytes = 0.0
    next_trigger = 0.0
    pending_resize: int | None = None
    stop_at: float | None = None
    run_started = 0.0
    metrics: dict[str, list[tuple[float, float]]] = {"Utilization": [], "BacklogAge": [], "BacklogBytes": []}
    arrived_per_min: list[tuple[float, float]] = []
    last_action: tuple[float, int] = (-1e9, 0)
    minute_bytes = 0.0
    for i, new in enumerate(arrivals):
        now = i * DT
        if new:
            waiting.append([now, new])
        minute_bytes += new
        # -- the job
        running = pending_resize is None and now >= up_at
        if batch_end is not None and now >= batch_end:
            # the batch's bytes leave the backlog
            left = batch_bytes
            while left > 0 and waiting:
                take = min(left, waiting[0][1])
                waiting[0][1] -= take
                left -= take
                if waiting[0][1] <= 1:
                    waiting.popleft()
            metrics["Utilization"].append((now, (batch_end - batch_start) / TRIGGER_S))
            batch_end = None
            if stop_at is not None:
                stop_at = now
        if stop_at is not None and batch_end is None and pending_resize is not None:
            # stopped: bill the run (1-minute minimum), then start the new size
            res.restarts += 1
            workers = pending_resize
            executors = float(workers - 1)
            pending_resize = None
            stop_at = None
            up_at = now + START_UP_S
            run_started = now
        if mode == "glue-auto-scaling" and running:
            backlog = sum(b for _, b in waiting)
            want = min(s.max_workers - 1, max(1, math.ceil((backlog / TRIGGER_S) / rate)))
            if want > executors:
                executors = min(float(want), executors + DT / 60)  # an executor a minute
            elif want < executors:
                executors = max(float(want), executors - DT / 60)
        if running and batch_end is None and now >= next_trigger:
            queued = sum(b for _, b in waiting)
            batch_bytes = min(queued, MAX_BATCH_BYTES)
            batch_start = now
            batch_end = now + BATCH_FIXED_S + batch_bytes / (max(1.0, math.floor(executors)) * rate)
            next_trigger = now + TRIGGER_S * math.ceil((batch_end - now) / TRIGGER_S)
        if not (pending_resize is None and now >= up_at):
            res.dead_s += DT
        # -- metrics, per minute
        if i % int(60 / DT) == 0:
            age = now - waiting[0][0] if waiting else 0.0
            metrics["BacklogAge"].append((now, age))
            metrics["BacklogBytes"].append((now, sum(b for _, b in waiting)))
            arrived_per_min.append((now, minute_bytes / 60))
            minute_bytes = 0.0
        res.ages.append(now - waiting[0][0] if waiting else 0.0)
        billed = math.ceil(executors) + 1 if mode == "glue-auto-scaling" else workers
        res.worker_seconds += billed * DT
        res.workers.append(billed)
        # -- the control plane
        if fixed is None and mode == "control-plane" and i % int(TICK_S / DT) == 0 and pending_resize is None:
            seen = now - PUBLICATION_DELAY_S
            since = seen - s.lookback_minutes * 60

            def read(
                name: str, points: list[tuple[float, float]] | None = None, since: float = since, seen: float = seen
            ) -> list[float]:
                series = points if points is not None else metrics[name]
                return [v for t, v in series if since <= t <= seen]

            newest = [t for t, _ in metrics["BacklogBytes"] if t <= seen]
            obs = Observation(
                utilization=read("Utilization"),
                backlog_age_s=read("BacklogAge"),
                backlog_bytes=read("BacklogBytes"),
                arrival_bytes_per_s=read("", arrived_per_min),
                data_age_s=(now - max(newest)) if newest else None,
            )
            view = JobView("RUNNING", workers=workers, started_at=T0 + timedelta(seconds=run_started))
            d = decide(obs, view, s, T0 + timedelta(seconds=now))
            if d.action == "scale" and d.desired_workers != workers:
                direction = 1 if d.desired_workers > workers else -1
                if last_action[1] == -direction and now - last_action[0] < s.cooldown_s:
                    res.reversals += 1
                last_action = (now, direction)
                res.actions += 1
                pending_resize = d.desired_workers
                stop_at = now
    return res


def hindsight(arrivals: list[float], s: ControlSettings, worker_mb_s: float) -> int | None:
    """The fewest constant workers that keep the backlog age under the SLA all trace long."""
    for w in range(s.min_workers, s.max_workers + 1):
        if max(simulate(arrivals, s, fixed=w, worker_mb_s=worker_mb_s).ages) <= s.latency_sla_s:
            return w
    return None


def summary(res: Result, s: ControlSettings, best: int | None, hours: float) -> list[str]:
    ages = sorted(res.ages)
    p95 = ages[int(0.95 * (len(ages) - 1))]
    over = sum(DT for a in res.ages if a > s.latency_sla_s) / 60
    minimum = best * hours if best else float("nan")
    return [
        res.name,
        f"{res.worker_hours:.1f}",
        f"{best if best else '-'}",
        f"{minimum:.1f}",
        f"{res.worker_hours / minimum:.2f}" if best else "-",
        f"{max(ages):.0f}",
        f"{p95:.0f}",
        f"{over:.0f}",
        str(res.actions),
        str(res.restarts),
        f"{res.dead_s / 60:.0f}",
        str(res.reversals),
    ]


HEADERS = [
    "trace / policy",
    "worker-h",
    "W*",
    "min worker-h",
    "ratio",
    "max age s",
    "p95 age s",
    "min over SLA",
    "actions",
    "restarts",
    "min dead",
    "reversals",
]


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADERS, *rows]) for i in range(len(HEADERS))]
    lines = [
        "  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in [HEADERS, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot(name: str, runs: list[Result], s: ControlSettings, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 7), sharex=True)
    hours = [i * DT / 3600 for i in range(len(runs[0].ages))]
    per_min = [sum(runs[0].arrivals[i : i + 6]) / 60 / MB for i in range(0, len(hours), 6)]
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="autoscale", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--hours", type=float, default=24)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--worker-mb-s", type=float, default=56.0)
    p.add_argument("--max-workers", type=int, default=20)
    p.add_argument("--docs", type=Path, default=Path("docs"))
    p.add_argument("--traces", default="", help="comma-separated subset")
    args = p.parse_args(argv)
    base = {"job_name": "sim", "min_workers": 2, "max_workers": args.max_workers, "worker_mb_s": args.worker_mb_s}
    policies = {
        "need (new)": load_settings(**base),
        "utilization (old)": load_settings(**{**base, "worker_mb_s": 0}),
    }
    rows = []
    wanted = set(filter(None, args.traces.split(",")))
    for name, arrivals in traces(args.hours, args.seed).items():
        if wanted and name not in wanted:
            continue
        s = policies["need (new)"]
        best = hindsight(arrivals, s, args.worker_mb_s)
        runs = [
            simulate(arrivals, ps, name=f"{name}: {label}", worker_mb_s=args.worker_mb_s)
            for label, ps in policies.items()
        ]
        runs.append(
            simulate(
                arrivals, s, mode="glue-auto-scaling", name=f"{name}: glue auto scaling", worker_mb_s=args.worker_mb_s
            )
        )
        rows += [summary(r, s, best, args.hours) for r in runs]
        args.docs.mkdir(exist_ok=True)
        plot(name, runs, s, args.docs)
    print(table(rows))
    sla = policies["need (new)"].latency_sla_s
    print(f"\n{args.hours:g} h per trace, {args.worker_mb_s:g} MB/s per worker, SLA {sla:g} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
