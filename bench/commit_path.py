"""``make bench-commits``: a batch's commit path through thousands of batches on one table (issue 45).

One real batch runs through local Spark to make the table, its load history and a data file the
way the job writes them. Then ``--batches`` batches run the driver's commit path as the job runs
it: the commit record, the table's append, the load history's append, the snapshot expiry and the
key memory (``ManifestBatchJob._finish``), each batch with a copy of that data file and its own
source. What a batch's Spark stages cost does not change with history; this is the part that did.

Time is compressed: the batches come every few tens of milliseconds, not every 30 s, so the
snapshot retention is counted in batches: what ``--snapshot_retention_hours`` (6) holds at a 30 s
trigger, ``--window`` batches (720), at the pace of the first 50 batches, its dense part (20
minutes) as many batches as it holds at 30 s. Figures per window
of batches around 10, 1,000 and 3,000: the commit duration (``TableCommitDuration``: record to
published), the table's and the history's commits inside it, and the snapshots and manifests the
table holds.

With ``--spark N``, N real batches of one small object each run through local Spark instead (the
whole trigger: read, write, commit), the same retention applying.

    python -m bench.commit_path [--batches 3000] [--window 720] [--spark 300] [--json rows.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from glue_processor.local.text import aligned

TRIGGER_S = 30


class Timed:
    """Wraps a method to add each call's duration to ``spent`` (ms)."""

    def __init__(self, owner: Any, name: str) -> None:
        self.spent = 0.0
        inner: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.spent += (time.perf_counter() - started) * 1000

        setattr(owner, name, timed)

    def take(self) -> float:
        spent, self.spent = self.spent, 0.0
        return spent


def _first_batch(spark: Any, root: Path) -> tuple[Any, Any]:
    from bench.batch import local_job, manifest_of
    from glue_processor.batch import ManifestBatchJob
    from glue_processor.settings import settings_from_mapping

    landing = root / "landing"
    landing.mkdir(parents=True)
    path = landing / "first.json"
    path.write_text("".join(json.dumps({"id": i, "v": "x" * 40, "n": i * 0.5}) + "\n" for i in range(2000)))
    settings = settings_from_mapping(local_job(root, table_format="iceberg"))
    job = ManifestBatchJob(spark, settings, query_id="bench-commits")
    job.start()
    record = job.run([manifest_of([path])], 0)
    return job, record


def _snapshot_of(job: Any) -> tuple[int, int]:
    """(snapshots, manifests of the current snapshot) of the job's table."""
    table = job.tables.catalog().load_table((job.settings.database, job.settings.table_name))
    current = table.current_snapshot()
    return len(table.metadata.snapshots), len(current.manifests(table.io)) if current is not None else 0


def run(batches: int, window: int) -> list[dict[str, float]]:
    from contracts.ledger import PublishedFile
    from glue_processor.local.session import local_session
    from glue_processor.table.datafiles import StatsPlan, WrittenFile
    from glue_processor.table.footer import footer_of
    from glue_processor.table.history import LoadHistory
    from glue_processor.table.iceberg import IcebergSink
    from glue_processor.table.read import local_file

    spark = local_session(cores="1")
    root = Path(tempfile.mkdtemp(prefix="bench-commits-"))
    try:
        job, first = _first_batch(spark, root)
        job.sleep = lambda s: None
        share = first.tables[0]
        model = local_file(share.data_files[0].final)
        source = first.sources[0]
        table_commit, history_commit = Timed(IcebergSink, "publish"), Timed(LoadHistory, "publish")
        sinks = [job.tables.sink(job.routes.legacy), job.tables.history]
        rows: list[dict[str, float]] = []
        _retention_in_batches(window)
        for b in range(1, batches + 1):
            committer = job.committer()
            attempt = uuid.uuid4().hex[:12]
            now = datetime.now(UTC)
            directory = local_file(sinks[0].output_dir(now, query_id=job.query_id, batch_id=b, attempt=attempt))
            path = directory / model.parent.name / model.name
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(model, path)
            table = job.tables.catalog().load_table((job.settings.database, job.settings.table_name))
            footer = footer_of(path)
            written = {path.as_uri(): WrittenFile(footer, StatsPlan(table.metadata).of(_metadata(path)))}
            data = PublishedFile(staged=path.as_uri(), final=path.as_uri(), bytes=path.stat().st_size)
            record = first.model_copy(
                update={
                    "batch_id": b,
                    "attempt": attempt,
                    "committed_at": now,
                    "manifests": (f"{root.as_uri()}/manifests/m{b:06d}.json",),
                    "tables": (share.model_copy(update={"data_files": (data,)}),),
                    "sources": (
                        source.model_copy(update={"key": f"k/{b:06d}.json", "manifest_uri": f"m{b:06d}.json"}),
                    ),
                }
            )
            started = time.monotonic()
            committer.commit(record)
            record_ms = (time.monotonic() - started) * 1000
            job._finish(record, committer, written, since=started)
            rows.append(_row(job, b, record_ms, table_commit, history_commit))
        return rows
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


def _row(job: Any, batch: int, other_ms: float, table_commit: Timed, history_commit: Timed) -> dict[str, float]:
    """One batch's figures; the table's snapshots and manifests every 10th batch (a catalog read)."""
    snapshots, manifests = _snapshot_of(job) if batch % 10 == 0 or batch <= 12 else (0, 0)
    return {
        "batch": batch,
        "commit_ms": job.last_commit_ms,
        "record_ms": other_ms,
        "table_ms": table_commit.take(),
        "history_ms": history_commit.take(),
        "snapshots": snapshots,
        "manifests": manifests,
    }


def run_spark(batches: int, window: int) -> list[dict[str, float]]:
    """``batches`` real batches of one small object each, through local Spark (what a stream's
    trigger runs): each one's commit duration and its whole duration."""
    from bench.batch import manifest_of
    from glue_processor.local.session import local_session
    from glue_processor.table.history import LoadHistory
    from glue_processor.table.iceberg import IcebergSink

    spark = local_session(cores="1")
    root = Path(tempfile.mkdtemp(prefix="bench-commits-spark-"))
    try:
        job, _ = _first_batch(spark, root)
        table_commit, history_commit = Timed(IcebergSink, "publish"), Timed(LoadHistory, "publish")
        _retention_in_batches(window)
        rows: list[dict[str, float]] = []
        for b in range(1, batches + 1):
            path = root / "landing" / f"b{b:06d}.json"
            path.write_text("".join(json.dumps({"id": i, "v": "x" * 40, "n": i * 0.5}) + "\n" for i in range(200)))
            started = time.monotonic()
            job.run([manifest_of([path])], b)
            batch_ms = (time.monotonic() - started) * 1000
            rows.append(_row(job, b, batch_ms, table_commit, history_commit))
        return rows
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


def _retention_in_batches(window: int) -> None:
    """The job's expiry, its retention counted in batches: ``window`` batches at the pace of the
    first 50 (what 6 hours are at a 30 s trigger), then fixed, as the job's retention is: its spans
    (the thinning's grid) stay where they are. Until then, the snapshot ``window`` batches before
    the newest is the cut-off."""
    from glue_processor.table import expiry
    from glue_processor.table.iceberg import BATCH_ID, DENSE

    real = expiry.expire_snapshots
    fixed: dict[str, timedelta] = {}
    dense_batches = int(DENSE.total_seconds()) // TRIGGER_S

    def expire(table: Any, *, max_age: timedelta | None = None, dense: timedelta = DENSE, **kwargs: Any) -> Any:
        ordered = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
        batch = {s.snapshot_id: int((s.summary or {}).get(BATCH_ID, -1)) for s in ordered}
        now = datetime.now(UTC)
        name = str(table.name())
        if name not in fixed and max(batch.values()) - min(batch.values()) >= 50:
            pace_ms = (ordered[-1].timestamp_ms - ordered[0].timestamp_ms) / max(
                1, max(batch.values()) - min(batch.values())
            )
            fixed[name] = timedelta(milliseconds=pace_ms * window)
        if name in fixed:
            dense = fixed[name] * dense_batches / window
            return real(table, max_age=fixed[name], now=now, dense=dense, **kwargs)
        newest = max(batch.values())
        old = [s.timestamp_ms for s in ordered if batch[s.snapshot_id] <= newest - window]
        cutoff_ms = (old[-1] + 1) if old else ordered[0].timestamp_ms
        recent = [s.timestamp_ms for s in ordered if batch[s.snapshot_id] > newest - dense_batches]
        dense = now - datetime.fromtimestamp(recent[0] / 1000, UTC)
        return real(table, max_age=now - datetime.fromtimestamp(cutoff_ms / 1000, UTC), now=now, dense=dense, **kwargs)

    expiry.expire_snapshots = expire


def _metadata(path: Path) -> Any:
    import pyarrow.parquet as pq

    return pq.read_metadata(path)


def summary(rows: list[dict[str, float]], at: list[int], width: int) -> list[list[str]]:
    out = []
    for point in at:
        lo, hi = max(1, point - width // 2), point + width // 2
        window = [r for r in rows if lo <= r["batch"] <= hi]
        if not window:
            continue
        counted = [r for r in window if r["snapshots"]]

        def med(name: str, part: list[dict[str, float]] = window) -> float:
            return statistics.median(r[name] for r in part) if part else 0.0

        commit = sorted(r["commit_ms"] for r in window)
        out.append(
            [
                f"{lo}-{hi}",
                f"{med('commit_ms'):.1f}",
                f"{commit[min(len(commit) - 1, int(0.95 * len(commit)))]:.1f}",
                f"{med('record_ms'):.1f}",
                f"{med('table_ms'):.1f}",
                f"{med('history_ms'):.1f}",
                f"{max((r['snapshots'] for r in counted), default=0):.0f}",
                f"{max((r['manifests'] for r in counted), default=0):.0f}",
            ]
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="commit_path", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batches", type=int, default=3000)
    p.add_argument("--window", type=int, default=6 * 3600 // TRIGGER_S, help="batches the retention holds (720)")
    p.add_argument("--spark", type=int, default=0, help="instead: this many real batches through local Spark")
    p.add_argument("--json", type=Path, help="write every batch's figures here")
    args = p.parse_args(argv)
    if args.spark:
        rows = run_spark(args.spark, args.window)
        at = [p for p in (10, 100, 200, 300, 500) if p <= args.spark] or [args.spark]
        head = ["batches", "commit ms", "p95", "batch ms", "table", "history", "snapshots", "manifests"]
        print(f"{args.spark} real batches through local Spark, one table (medians):")
        print(aligned(head, summary(rows, at, width=20)))
        if args.json:
            args.json.write_text(json.dumps(rows))
        return 0
    rows = run(args.batches, args.window)
    if args.json:
        args.json.write_text(json.dumps(rows))
    at = [p for p in (10, 100, 1000, 2000, 3000) if p <= args.batches] or [args.batches]
    head = ["batches", "commit ms", "p95", "record", "table", "history", "snapshots", "manifests"]
    print(f"the commit path of {args.batches} batches on one table (medians; retention holds {args.window}):")
    print(aligned(head, summary(rows, at, width=20)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
