"""One benchmark engine in its own process (a fresh JVM), run ``--repeat`` times: cold, then warm.

What is timed is the batch: for ours, the job's start-up (its modules, its table, what it learnt
from earlier batches) happens once before its stream starts and is reported as ``job_start_s``;
the Spark session's start-up is ``session_startup_s`` for every engine. Cold is the first batch in
a fresh JVM and fresh Python workers.

    python -m bench.jobs ours|seed|duckdb --data DIR --out DIR [--repeat 2]

Prints one JSON object per run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.batch import batch_job, manifest_of
from bench.data import COLUMNS
from bench.proc import PeakRss

MB = 1024 * 1024
TARGET = 128 * MB


def output_stats(out: Path) -> dict[str, Any]:
    sizes = sorted(
        p.stat().st_size
        for p in out.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(out).parts)
    )
    total = sum(sizes)
    near = sum(s for s in sizes if abs(s - TARGET) <= 0.15 * TARGET)
    return {
        "files": len(sizes),
        "bytes": total,
        "min_mb": round(sizes[0] / MB, 1) if sizes else 0,
        "median_mb": round(statistics.median(sizes) / MB, 1) if sizes else 0,
        "max_mb": round(sizes[-1] / MB, 1) if sizes else 0,
        "share_within_15pct": round(near / total, 3) if total else 0.0,
    }


def session(cores: str = "2") -> Any:
    from glue_processor.local.session import local_session

    return local_session("bench", cores=cores, driver_memory="8g")


def start_ours(spark: Any, files: list[Path], out: Path, run: int, max_columns: int | None = None) -> Any:
    """The job as its stream starts (modules loaded, table open, what a previous run learnt kept):
    start-up happens once per job, not per batch, so it is not part of a batch's time."""
    previous = getattr(start_ours, "previous", None)
    return batch_job(spark, files, out, f"bench{run:04d}", previous=previous, max_columns=max_columns)


def run_ours(job: Any, files: list[Path], out: Path, run: int) -> dict[str, Any]:
    record = job.run([manifest_of(files)], run)
    start_ours.previous = job  # type: ignore[attr-defined]
    return {
        "records": record.stats.records_out,
        "batch_s": record.stats.duration_s,
        "stages": record.stats.stage_s,
        **output_stats(out / "data"),
    }


def run_seed(spark: Any, files: list[Path], out: Path, run: int) -> dict[str, Any]:
    """The reviewed seed job: read.json with inference, cast every column to string, count,
    coalesce to estimated_size_mb / 128 partitions, write Parquet."""
    from pyspark.sql import functions as F

    df = spark.read.json([p.as_uri() for p in files], multiLine=False)
    df = df.select([F.col(c).cast("string").alias(c) for c in df.columns])
    record_count = df.count()
    estimated_size_mb = record_count / 1024
    num_partitions = max(int(estimated_size_mb / 128), 1)
    df.coalesce(num_partitions).write.mode("overwrite").parquet((out / "data").as_uri())
    return {"records": record_count, **output_stats(out / "data")}


def run_duckdb(files: list[Path], out: Path) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    cols = "{" + ", ".join(f"'{c}': 'VARCHAR'" for c in COLUMNS) + "}"
    paths = "[" + ", ".join(f"'{p}'" for p in files) + "]"
    (out / "data").mkdir(parents=True)
    target = out / "data" / "out.parquet"
    query = f"SELECT * FROM read_ndjson({paths}, columns={cols})"
    con.execute(f"COPY ({query}) TO '{target}' (FORMAT parquet, ROW_GROUP_SIZE 122880)")
    records = con.execute(f"SELECT count(*) FROM '{target}'").fetchone()[0]  # type: ignore[index]
    return {"records": records, **output_stats(out / "data")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.jobs")
    p.add_argument("engine", choices=["ours", "seed", "duckdb"])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--cores", default="2", help="local Spark cores (default 2)")
    p.add_argument("--files", type=int, default=0, help="only the first N files (default all)")
    p.add_argument("--max-columns", type=int, default=0, help="ours: the job's --max_columns (default: its own)")
    args = p.parse_args(argv)
    args.data, args.out = args.data.resolve(), args.out.resolve()
    files = sorted(args.data.glob("*.json"))[: args.files or None]
    input_bytes = sum(f.stat().st_size for f in files)
    spark = None
    with PeakRss() as rss:
        started = time.monotonic()
        if args.engine != "duckdb":
            spark = session(args.cores)
        startup_s = time.monotonic() - started
        for run in range(args.repeat):
            out = args.out / f"{args.engine}-{run}"
            shutil.rmtree(out, ignore_errors=True)
            t_start = time.monotonic()
            job = start_ours(spark, files, out, run, args.max_columns or None) if args.engine == "ours" else None
            job_start_s = time.monotonic() - t_start
            t0 = time.monotonic()
            if args.engine == "ours":
                result = run_ours(job, files, out, run)
            elif args.engine == "seed":
                result = run_seed(spark, files, out, run)
            else:
                result = run_duckdb(files, out)
            seconds = time.monotonic() - t0
            print(
                json.dumps(
                    {
                        "engine": args.engine,
                        "cores": args.cores,
                        "run": run,
                        "phase": "cold" if run == 0 else "warm",
                        "input_bytes": input_bytes,
                        "seconds": round(seconds, 2),
                        "session_startup_s": round(startup_s, 2),
                        "job_start_s": round(job_start_s, 2),
                        "peak_rss_bytes": rss.peak,
                        **result,
                    }
                ),
                flush=True,
            )
        if args.engine == "ours" and not args.files:
            print(json.dumps({"engine": "ours", "overhead": fixed_overhead(spark, files, args.out)}), flush=True)
    return 0


def fixed_overhead(spark: Any, files: list[Path], out: Path) -> dict[str, float]:
    """Warm: one small-file batch through the batch path, and an empty trigger of the real query."""
    import tempfile

    from glue_processor.batch import ManifestBatchJob
    from glue_processor.settings import settings_from_mapping
    from glue_processor.stream import start_query

    small_dir = Path(tempfile.mkdtemp(dir=out))
    small = small_dir / "small.json"
    with files[0].open("rb") as src:
        small.write_bytes(b"".join(src.readline() for _ in range(10)))
    job = start_ours(spark, [small], small_dir / "run", 900)
    t0 = time.monotonic()
    run_ours(job, [small], small_dir / "run", 900)
    small_s = time.monotonic() - t0

    root = Path(tempfile.mkdtemp(dir=out))
    (root / "manifests").mkdir()
    settings = settings_from_mapping(
        {
            "manifest_uri": (root / "manifests").as_uri(),
            "output_uri": (root / "data").as_uri(),
            "quarantine_uri": (root / "q").as_uri(),
            "checkpoint_uri": (root / "cp").as_uri(),
            "trigger_interval_seconds": "1",
            "metrics_sinks": "",
        }
    )
    query = start_query(spark, settings, ManifestBatchJob(spark, settings))
    deadline = time.monotonic() + 25
    empties: list[float] = []
    while time.monotonic() < deadline and len(empties) < 2:
        time.sleep(0.5)
        empties = [
            p["durationMs"].get("triggerExecution", 0) / 1000 for p in query.recentProgress if p["numInputRows"] == 0
        ]
    query.stop()
    return {
        "small_file_batch_s": round(small_s, 3),
        "empty_trigger_s": round(statistics.median(empties), 3) if empties else -1.0,
    }


if __name__ == "__main__":
    sys.exit(main())
