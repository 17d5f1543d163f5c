"""Driver state over a long run: memory and restart time of the dedupe index, simulated.

100,000 batches at the seed's load (200,000 objects an hour, a batch every 30 s: 1,667 object
versions per batch) go through the job's own :class:`glue_processor.plan.dedupe.DedupeIndex` with a
24 h window. Every 5,000 batches it records the index's bytes and the process's RSS, and what a
restart costs: loading the snapshot, and parsing the commit records written after it (at most
``DEDUPE_SNAPSHOT_BATCHES``, each listing 1,667 sources). Reading those objects from S3 is not
simulated (a GET of a ~500 KB record takes tens of milliseconds).

``python -m bench.driver_state`` prints the table and writes ``docs/driver-state.png``.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psutil

from contracts.ledger import BatchStats, CommitRecord, SourceRecord
from glue_processor.plan.dedupe import DedupeIndex
from glue_processor.plan.memory import DEDUPE_SNAPSHOT_BATCHES

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
MB = 1024 * 1024


def commit_record(batch_id: int, sources: int) -> bytes:
    at = T0 + timedelta(seconds=30 * batch_id)
    src = tuple(
        SourceRecord(
            bucket="landing",
            key=f"incoming/2026/01/01/{batch_id}/{i:05d}.json",
            etag=f"{batch_id:016x}{i:016x}",
            size=3_500_000,
            event_time=at,
            manifest_uri=f"s3://manifests/manifests/{batch_id}.json",
            status="ingested",
            records=3000,
        )
        for i in range(sources)
    )
    record = CommitRecord(
        query_id="q",
        batch_id=batch_id,
        attempt="a",
        committed_at=at,
        partition="dt=2026-01-01",
        manifests=(),
        data_files=(),
        quarantine_files=(),
        sources=src,
        keys=(),
        stats=BatchStats(),
    )
    return record.model_dump_json().encode()


def simulate(batches: int, per_batch: int, every: int) -> list[dict[str, float]]:
    rng = np.random.default_rng(7)
    index = DedupeIndex()
    window = timedelta(hours=24)
    proc = psutil.Process()
    sample_record = commit_record(0, per_batch)
    rows = []
    for b in range(batches):
        at = T0 + timedelta(seconds=30 * b)
        hi = rng.integers(0, 2**63, per_batch, dtype=np.uint64)
        lo = rng.integers(0, 2**63, per_batch, dtype=np.uint64)
        index.add_digests(b, at, hi, lo)
        index.expire(at - window)
        if (b + 1) % every == 0:
            t = time.perf_counter()
            snapshot = index.to_bytes(keys=(), at=at)
            DedupeIndex.from_bytes(snapshot)
            load_s = time.perf_counter() - t
            t = time.perf_counter()
            for _ in range(DEDUPE_SNAPSHOT_BATCHES):
                CommitRecord.model_validate_json(sample_record)
            replay_s = time.perf_counter() - t
            rows.append(
                {
                    "batches": b + 1,
                    "versions": len(index),
                    "index_mb": index.nbytes / MB,
                    "rss_mb": proc.memory_info().rss / MB,
                    "snapshot_mb": len(snapshot) / MB,
                    "restart_s": load_s + replay_s,
                }
            )
    return rows


def plot(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["batches"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(x, [r["rss_mb"] for r in rows], marker="o", label="process RSS")
    a.plot(x, [r["index_mb"] for r in rows], marker="o", label="dedupe index")
    a.set_xlabel("batches (30 s each)")
    a.set_ylabel("MB")
    a.set_title("driver memory, 24 h window at 200,000 objects/h")
    a.legend()
    b.plot(x, [r["restart_s"] for r in rows], marker="o", color="tab:red")
    b.set_xlabel("batches (30 s each)")
    b.set_ylabel("seconds")
    b.set_title(f"restart: load snapshot + parse {DEDUPE_SNAPSHOT_BATCHES} records")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="driver_state")
    p.add_argument("--batches", type=int, default=100_000)
    p.add_argument("--per-batch", type=int, default=1667)
    p.add_argument("--every", type=int, default=5000)
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "driver-state.png")
    args = p.parse_args(argv)
    rows = simulate(args.batches, args.per_batch, args.every)
    print(f"{'batches':>8} {'versions':>10} {'index MB':>9} {'RSS MB':>8} {'snapshot MB':>12} {'restart s':>10}")
    for r in rows:
        print(
            f"{r['batches']:>8,.0f} {r['versions']:>10,.0f} {r['index_mb']:>9.1f} {r['rss_mb']:>8.0f} "
            f"{r['snapshot_mb']:>12.1f} {r['restart_s']:>10.2f}"
        )
    plot(rows, args.plot)
    print(f"written {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
