"""A surge: more data written in a short window than the largest cluster clears in it (a backfill
dumped at once), seen from the manifests' names within seconds, not from CloudWatch minutes later.

The manifest Lambda signals the control plane when an invocation wrote much (``contracts.surge``);
the control plane sums what every invocation wrote from a listing of the manifest prefix (the data
bytes end each manifest's name: ``contracts.layout``), so no invocation needs to see the others.
One function set for the Lambda (``service.py``) and ``make autoscale``'s model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from lambdas.control_plane.decision import Observation, worker_rate
from lambdas.control_plane.settings import ControlSettings

# The window a surge is measured over: bytes written in it against what max_workers clear in it.
SURGE_WINDOW_S = 120.0


class ManifestListing(Protocol):
    def written_since(self, since: datetime, *, named_from: datetime | None = None) -> list[tuple[datetime, float]]:
        """(write time, data bytes) of each manifest written after ``since``; ``named_from``: the
        earliest event a signalling invocation's manifests are named after, when older than usual."""
        ...


def lookback(s: ControlSettings) -> timedelta:
    """How far back a surge lists: its window, and back to the oldest backlog datapoint a decision
    still acts upon (``with_written`` counts from that datapoint's minute)."""
    return timedelta(seconds=max(SURGE_WINDOW_S, s.stale_after_s + 60))


def ceiling_bytes_per_s(obs: Observation, s: ControlSettings) -> float:
    """What the largest cluster processes: max_workers' executors at the (learned) worker rate."""
    return (s.max_workers - 1) * worker_rate(obs, s)


def written_in_window(listed: Sequence[tuple[datetime, float]], now: datetime) -> float:
    """The data bytes of the listed manifests written within SURGE_WINDOW_S of ``now``."""
    window = now - timedelta(seconds=SURGE_WINDOW_S)
    return sum(b for t, b in listed if t > window)


def is_surge(written: float, obs: Observation, s: ControlSettings) -> bool:
    """More bytes written within SURGE_WINDOW_S than the largest cluster clears in it: no steady
    load can do that (it would be over the ceiling the SLA is sized for), a dump does."""
    return written > ceiling_bytes_per_s(obs, s) * SURGE_WINDOW_S


def newest_minute(obs: Observation, now: datetime) -> datetime | None:
    """The start of the newest backlog datapoint's minute (None: no datapoint)."""
    return None if obs.data_age_s is None else now - timedelta(seconds=obs.data_age_s)


def with_written(obs: Observation, written: Sequence[tuple[datetime, float]], now: datetime) -> Observation:
    """The observation with the manifests written since its newest backlog datapoint's minute began
    (``written``): a newest backlog datapoint that counts them, and a newest arrival minute at the
    rate of the last minute's writes.

    CloudWatch says which minute a datapoint is in, not when in it the job measured: what was written
    within that minute may be in it or not, what was written after it is not. So the backlog is
    max(datapoint, written within its minute) + written after: never a byte counted twice, at most
    the older backlog under-counted when the minute's writes outweigh it. The arrival minute makes
    the written bytes young (the backlog is spread over the arrival minutes by age, newest first)
    and the rate to keep up with: a dump still being written is sized for in one resize, not two."""
    start = newest_minute(obs, now)
    if start is None:
        return obs
    end = start + timedelta(seconds=60)
    within = sum(b for t, b in written if start <= t < end)
    after = sum(b for t, b in written if t >= end)
    last = obs.backlog_bytes[-1] if obs.backlog_bytes else 0.0
    estimate = max(last, within) + after
    if estimate <= last:
        return obs
    age = obs.backlog_age_s[-1] if obs.backlog_age_s else 0.0
    rate = sum(b for t, b in written if t > now - timedelta(seconds=60)) / 60
    return dataclasses.replace(
        obs,
        backlog_bytes=[*obs.backlog_bytes, estimate],
        backlog_age_s=[*obs.backlog_age_s, age],
        arrival_bytes_per_s=[*obs.arrival_bytes_per_s, rate],
    )
