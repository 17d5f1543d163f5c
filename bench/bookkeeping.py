"""Bookkeeping at scale: checkpoint size and restart time as the number of processed manifests grows.

Spark's file source remembers every file it processed in ``<checkpoint>/sources/0`` (compacted every
``spark.sql.streaming.fileSource.log.compactInterval`` batches) - the known "file-source log
growth" complaint. This simulates >= 100,000 manifests (empty JSON, no data needed) through the
job's own source definition and a no-op batch, and after each step measures the checkpoint size
and the restart time (a fresh query on the same checkpoint picking up one new manifest).

    python -m bench.bookkeeping --manifests 100000 --steps 10
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_query(spark: Any, manifests: Path, checkpoint: Path, per_trigger: int, archive: Path | None) -> float:
    """Drain with availableNow; return wall seconds (start -> terminated)."""
    t0 = time.monotonic()
    reader = (
        spark.readStream.format("text")
        .option("wholetext", True)
        .option("maxFilesPerTrigger", per_trigger)
        .option("pathGlobFilter", "*.json")
    )
    if archive is not None:
        reader = reader.option("cleanSource", "archive").option("sourceArchiveDir", archive.as_uri())
    df = reader.load(manifests.as_uri()).select(F.input_file_name().alias("manifest_uri"), "value")
    q = (
        df.writeStream.queryName("bookkeeping")
        .option("checkpointLocation", checkpoint.as_uri())
        .foreachBatch(lambda batch, batch_id: None)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bookkeeping", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--manifests", type=int, default=100_000)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--per-trigger", type=int, default=1000)
    p.add_argument("--out", type=Path, default=Path(".bench/bookkeeping"))
    p.add_argument("--archive", action="store_true", help="archive processed manifests (cleanSource=archive)")
    p.add_argument(
        "--rotate",
        type=int,
        default=0,
        help="new checkpoint generation after this many manifests (needs --archive), as the job does",
    )
    args = p.parse_args(argv)
    args.out = args.out.resolve()
    from glue_processor.local.session import local_session

    shutil.rmtree(args.out, ignore_errors=True)
    manifests = args.out / "manifests"
    generation, in_generation = 1, 0
    manifests.mkdir(parents=True)
    spark = local_session("bookkeeping", cores="2", driver_memory="4g")
    spark.sparkContext.setLogLevel("ERROR")
    rows = []
    made = 0
    per_step = args.manifests // args.steps
    for step in range(1, args.steps + 1):
        for i in range(made, made + per_step):
            (manifests / f"m{i:08d}.json").write_text("{}")
        made += per_step
        archive = args.out / "archive" if args.archive else None
        if args.rotate and in_generation >= args.rotate:
            generation, in_generation = generation + 1, 0
        checkpoint = args.out / "checkpoint" / f"gen-{generation:05d}"
        in_generation += per_step + 1
        drain_s = run_query(spark, manifests, checkpoint, args.per_trigger, archive)
        (manifests / f"r{step:08d}.json").write_text("{}")  # one new manifest after a "restart"
        made_restart = run_query(spark, manifests, checkpoint, args.per_trigger, archive)
        row = {
            "manifests": made + step,
            "generation": generation,
            "listed_manifests": sum(1 for _ in manifests.glob("*.json")),
            "checkpoint_mb": round(du(checkpoint) / 1024**2, 2),
            "source_log_mb": round(du(checkpoint / "sources") / 1024**2, 2),
            "checkpoint_files": sum(1 for x in checkpoint.rglob("*") if x.is_file()),
            "drain_s": round(drain_s, 1),
            "restart_s": round(made_restart, 2),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    (args.out / "bookkeeping.json").write_text(json.dumps(rows, indent=1))
    _plot(rows, args.out / "bookkeeping.png")
    spark.stop()
    return 0


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r["manifests"] for r in rows]
    ax.plot(xs, [r["restart_s"] for r in rows], "o-", label="restart + one manifest (s)")
    ax.set_xlabel("manifests processed")
    ax.set_ylabel("seconds")
    ax2 = ax.twinx()
    ax2.plot(xs, [r["checkpoint_mb"] for r in rows], "s--", color="tab:orange", label="checkpoint MB")
    ax2.set_ylabel("MB")
    fig.legend(loc="lower right")
    ax.set_title("File-source bookkeeping as manifests accumulate")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
