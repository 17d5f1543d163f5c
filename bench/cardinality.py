"""A partition source of unbounded cardinality: one object whose every row has a value of its own,
through the job's real batch path, partitioned by that value (issue 27's partition limit).

Prints the batch's time, the driver's peak memory, the files written and the rows moved to the null
partition past ``--partition_limit_per_batch``. One run: the shape is the slow one.

    python -m bench.cardinality [--values 200000] [--limit 10000]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import time
from pathlib import Path

from bench.batch import batch_job, manifest_of

ROOT = Path(__file__).resolve().parents[1]


def generate(root: Path, values: int) -> Path:
    """``values`` rows, each with a value of ``c`` of its own (cached)."""
    path = root / "bucket" / "one.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"id": i, "c": f"v{i:08d}"}) + "\n" for i in range(values)))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.cardinality")
    p.add_argument("--values", type=int, default=200_000, help="rows, each its own partition (default 200,000)")
    p.add_argument("--limit", type=int, default=10_000, help="--partition_limit_per_batch (default 10,000)")
    p.add_argument("--cores", default="2")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "cardinality")
    args = p.parse_args(argv)
    from bench.jobs import session

    source = generate(args.out / f"data-{args.values}", args.values)
    spark = session(args.cores)
    out = args.out / "run"
    shutil.rmtree(out, ignore_errors=True)
    bound = str(min(args.limit, 1000))
    schema = args.out / "declared.json"  # a partition column is declared (--partition_by)
    schema.write_text('{"columns": {"c": "string"}}')
    settings = {
        "schema": schema.as_uri(),
        "partition_by": "c",
        "partition_limit_per_batch": str(args.limit),
        "max_partitions_per_batch": bound,
    }
    job = batch_job(spark, [source], out, "cardinality", settings=settings)
    started = time.monotonic()
    record = job.run([manifest_of([source])], 0)
    seconds = time.monotonic() - started
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(
        f"{args.values:,} values, limit {args.limit:,}: {seconds:.1f} s, driver peak {rss_mb} MB, "
        f"{record.stats.output_files:,} files, {record.stats.partitions:,} partitions, "
        f"{record.stats.overflow_records:,} rows moved, {record.stats.records_out:,} rows; {record.stats.stage_s}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
