"""What the sizing reads, built from the job's and the manifest Lambda's metrics.

One function for the Lambda (``service.py``) and ``make autoscale``'s model (``bench/autoscale.py``),
so the model replays exactly what the Lambda computes.

- arrival: the manifest Lambda's ``BytesPerManifest`` per-minute Sum, settled minutes only (a Sum
  over the current partial minute reads low: ~10-13 % at a steady load);
- backlog bytes: the job's exact ``BacklogDataBytes`` (from the waiting manifests' names); from a
  job too old to publish it, waiting manifests x the mean bytes per manifest;
- throughput: learned from the job's own ``InputBytes`` over its ``ProcessingDuration`` (the
  batches' parallel stages; ``BatchDuration`` from an older job) over the running run's settled
  minutes, per executor (see :func:`learned_rate`), remembered across runs.
"""

from __future__ import annotations

from datetime import datetime

from contracts import metrics as M
from lambdas.control_plane.decision import Observation
from lambdas.control_plane.metrics_reader import SETTLE_S, MetricsReader
from lambdas.control_plane.settings import ControlSettings

# A run's first minutes teach nothing about its speed: Glue's start-up, then the cold first batch.
WARM_UP_S = 180
# Learn only from this much batch time (seconds) at least: a few batches, not one.
MIN_BUSY_S = 60.0


def observe(
    metrics: MetricsReader,
    s: ControlSettings,
    *,
    workers: int | None,
    running_since: datetime | None,
    now: datetime,
    remembered_rate: float | None,
) -> Observation:
    """The observation the decision needs (``workers``/``running_since``: the running run's, if any)."""
    minutes = s.lookback_minutes
    lam = {"service": s.manifest_service}
    listed = metrics.series(M.BYTES_PER_MANIFEST.name, minutes=minutes, stat="Sum", dimensions=lam, settled=True)
    backlog = metrics.series(M.BACKLOG_DATA_BYTES.name, minutes=minutes)
    if not backlog:  # a job that does not publish it yet
        per_manifest = metrics.series(
            M.BYTES_PER_MANIFEST.name, minutes=minutes, stat="Average", dimensions=lam, settled=True
        )
        mean = sum(per_manifest) / len(per_manifest) if per_manifest else 0.0
        backlog = [n * mean for n in metrics.series(M.BACKLOG_MANIFESTS.name, minutes=minutes)]
    return Observation(
        utilization=metrics.series(M.UTILIZATION.name, minutes=minutes),
        backlog_age_s=metrics.series(M.BACKLOG_AGE.name, minutes=minutes),
        backlog_bytes=backlog,
        arrival_bytes_per_s=[b / 60 for b in listed],
        data_age_s=metrics.age_s(M.BACKLOG_AGE.name, minutes=minutes),
        worker_bytes_per_s=learned_rate(
            metrics, s, workers=workers, running_since=running_since, now=now, remembered=remembered_rate
        ),
    )


def learned_rate(
    metrics: MetricsReader,
    s: ControlSettings,
    *,
    workers: int | None,
    running_since: datetime | None,
    now: datetime,
    remembered: float | None,
) -> float | None:
    """Data bytes per second one worker processes, as the running run measures it: its batches'
    ``InputBytes`` over their ``ProcessingDuration``, per executor (workers - 1), over its settled
    minutes past the warm-up, once they add up to MIN_BUSY_S. Small batches, where a task's fixed
    cost weighs, read a little slow: the error errs toward more workers. None (use ``worker_mb_s``)
    until a run has taught anything; what a run taught stays until the next one teaches again."""
    if workers is None or workers < 2 or running_since is None:
        return remembered
    # settled minutes that began after the warm-up (the newest settled one ended SETTLE_S ago at least)
    minutes = int(((now - running_since).total_seconds() - WARM_UP_S - SETTLE_S - 60) // 60)
    minutes = min(s.lookback_minutes, minutes)
    if minutes < 3:
        return remembered
    read = sum(metrics.series(M.INPUT_BYTES.name, minutes=minutes, stat="Sum", settled=True))
    busy_ms = metrics.series(M.PROCESSING_DURATION.name, minutes=minutes, stat="Sum", settled=True)
    if not busy_ms:  # a job too old to publish it: whole batches, their fixed costs included
        busy_ms = metrics.series(M.BATCH_DURATION.name, minutes=minutes, stat="Sum", settled=True)
    busy = sum(busy_ms) / 1000
    if busy < MIN_BUSY_S or read <= 0:
        return remembered
    return read / busy / (workers - 1)
