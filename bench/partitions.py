"""``make bench-partitions``: what partitioning from the record costs a batch (issue 27).

The same NDJSON (events whose ``ts`` spans 30 days, 5 event types, a customer id of 100 and one
of 1,000 values) through the job's real batch path, in one process, once per partitioning: the
default ``day(_ingest_time)`` (one partition per batch), ``day(ts)``, ``day(ts),event_type``,
``c100`` and ``c1000`` (identity), and ``id`` (a value per row: past the partition limit, run once).
Each is run cold then warm; the table shows the warm batch, the partitions it touched, the files it
wrote and files per partition, the rows it moved to the null partition, and its
time against the unpartitioned batch's.

    python -m bench.partitions [--mb 64] [--files 24] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.batch import batch_job, manifest_of
from glue_processor.local.text import aligned

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
EVENTS = ("click", "view", "purchase", "signup", "error")
SPECS = {
    "none (day(_ingest_time))": "",
    "day(ts)": "day(ts)",
    "day(ts),event_type": "day(ts),event_type",
    "identity, 100 values": "c100",
    "identity, 1000 values": "c1000",
    # a field unique per row: past --partition_limit_per_batch (10,000) the smallest partitions' rows go
    # to the null partition (glue_processor.write.overflow); one run, it is the slow one
    "identity, a value per row": "id",
}
ONCE = {"id"}
SCHEMA = {"columns": {"ts": {"type": "timestamp", "format": "iso8601"}}}


def generate(root: Path, *, total_mb: int, files: int, seed: int = 27) -> list[Path]:
    """``files`` NDJSON files of about ``total_mb`` MB in all (cached by a stamp)."""
    stamp = root / f".done-{total_mb}-{files}-{seed}"
    if stamp.exists():
        return sorted(root.glob("*.json"))
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = random.Random(seed)  # noqa: S311 - reproducible data
    start = datetime(2026, 10, 1, tzinfo=UTC)
    per_file = total_mb * MB // files
    paths = []
    for i in range(files):
        lines: list[str] = []
        size = 0
        while size < per_file:
            ts = start + timedelta(seconds=rng.randrange(30 * 86400))
            record = {
                "id": f"{i}-{len(lines)}",
                "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "event_type": rng.choice(EVENTS),
                "c100": f"customer-{rng.randrange(100):03d}",
                "c1000": f"tenant-{rng.randrange(1000):04d}",
                "amount": round(rng.uniform(0, 500), 2),
                "page": f"/p/{rng.randrange(5000)}",
                "ua": rng.choice(["Mozilla/5.0 (X11; Linux x86_64)", "curl/8.5.0", "okhttp/4.12"]),
            }
            line = json.dumps(record, separators=(",", ":")) + "\n"
            lines.append(line)
            size += len(line)
        path = root / f"events-{i:03d}.json"
        path.write_text("".join(lines), encoding="utf-8")
        paths.append(path)
    stamp.touch()
    return paths


def run(spark: Any, files: list[Path], out: Path, spec: str, repeat: int) -> dict[str, Any]:
    out.parent.mkdir(parents=True, exist_ok=True)
    schema = out.parent / "schema.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    settings = {"schema": schema.as_uri(), **({"partition_by": spec} if spec else {})}
    best: dict[str, Any] = {}
    for attempt in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        job = batch_job(spark, files, out, f"parts{attempt}", settings=settings)
        t0 = time.monotonic()
        record = job.run([manifest_of(files)], 0)
        seconds = time.monotonic() - t0
        # a file's partition is its directory under the batch attempt's (``.../<attempt>/<partition>/``)
        partitions = {f.final.split(f"/{record.attempt}/", 1)[-1].rpartition("/")[0] for f in record.data_files}
        row = {
            "seconds": round(seconds, 2),
            "records": record.stats.records_out,
            "files": record.stats.output_files,
            "partitions": len(partitions) or None,
            "moved": record.stats.overflow_records,
            "stages": record.stats.stage_s,
        }
        if not best or row["seconds"] < best["seconds"]:
            best = row
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.partitions")
    p.add_argument("--mb", type=int, default=64, help="MB of NDJSON (default 64)")
    p.add_argument("--files", type=int, default=24, help="files (default 24)")
    p.add_argument("--repeat", type=int, default=2, help="runs per partitioning; the best is shown (default 2)")
    p.add_argument("--cores", default="2")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "partitions")
    p.add_argument("--only", action="append", default=[], help="a name of SPECS to run (repeatable; default all)")
    args = p.parse_args(argv)
    from bench.jobs import session

    files = generate(args.out / f"data-{args.mb}", total_mb=args.mb, files=args.files)
    spark = session(args.cores)
    rows, base = [], None
    for name, spec in SPECS.items():
        if args.only and name not in args.only:
            continue
        r = run(
            spark,
            files,
            args.out / "runs" / "".join(c if c.isalnum() else "_" for c in spec or "none"),
            spec,
            1 if spec in ONCE else args.repeat,
        )
        base = base or r["seconds"]
        parts = r["partitions"] or 1
        rows.append(
            [
                name,
                parts,
                r["files"],
                round(r["files"] / parts, 2),
                r["records"],
                r["moved"],
                r["seconds"],
                round(r["seconds"] / base, 2),
                json.dumps(r["stages"]),
            ]
        )
    mb = sum(f.stat().st_size for f in files) / MB
    print(f"{len(files)} files, {mb:.0f} MB, local[{args.cores}], best of {args.repeat}")
    print(
        aligned(
            [
                "partitioning",
                "partitions",
                "files",
                "files/partition",
                "rows",
                "moved",
                "batch s",
                "x none",
                "stages s",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
