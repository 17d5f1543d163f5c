"""``make bench-overwrites``: what replacing a changed object's rows costs a batch (issue 44).

A table of at least 1,000 data files is built through the job's real batch path: ``--batches``
batches of ``--objects`` objects, each object's rows spread over ``--shards`` partitions (declared
``shard``, partitioned by it), so each batch writes a file per partition. Then batches of
``--batch-objects`` new objects run, each alternately with no overwrite and with 1% of its objects
being new versions of keys loaded by earlier batches (``on_overwrite: replace``). The difference is
what the overwrites cost: finding the files that hold the old rows (the table's metadata, the key
index), rewriting them without those rows, and the commit that swaps them.

    python -m bench.overwrites [--batches 20] [--shards 50] [--objects 40] [--batch-objects 400] [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.batch import local_job
from contracts.ledger import Stage
from glue_processor.local.text import aligned

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "landing"
MB = 1024 * 1024


def write_object(path: Path, rng: random.Random, *, rows: int, shards: int, tag: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (
        json.dumps({"shard": f"s{i % shards:03d}", "v": tag, "n": i, "pad": rng.randbytes(40).hex()})
        for i in range(rows)
    )
    path.write_text("\n".join(lines) + "\n")


def entry(landing: Path, key: str, at: datetime, sequencer: str) -> Any:
    from contracts.manifest import ManifestEntry

    body = (landing / key).read_bytes()
    return ManifestEntry(
        bucket=BUCKET,
        key=key,
        size=len(body),
        etag=hashlib.md5(body).hexdigest(),
        event_time=at,
        sequencer=sequencer,
    )


def manifest(entries: list[Any], n: int) -> tuple[str, str]:
    from contracts.manifest import Manifest

    return (f"file:///bench/overwrites/m{n:06d}.json", Manifest.of(entries).to_json().decode())


class Bench:
    def __init__(self, spark: Any, out: Path, args: argparse.Namespace) -> None:
        from glue_processor.batch import ManifestBatchJob
        from glue_processor.settings import settings_from_mapping

        shutil.rmtree(out, ignore_errors=True)
        self.landing = out / "buckets" / BUCKET
        (out / "schema.json").parent.mkdir(parents=True, exist_ok=True)
        (out / "schema.json").write_text(json.dumps({"columns": {"shard": "string"}}))
        self.args, self.rng = args, random.Random(44)  # noqa: S311 - reproducible data
        self.settings = settings_from_mapping(
            local_job(
                out,
                objects=out / "buckets",
                schema=(out / "schema.json").as_uri(),
                partition_by="shard",
                on_overwrite="replace",
            )
        )
        self.job = ManifestBatchJob(spark, self.settings, query_id="benchoverwrites0")
        self.job.start()
        self.batch = 0
        self.seq = 0
        self.loaded: list[str] = []

    def _event(self, key: str, tag: str) -> Any:
        write_object(self.landing / key, self.rng, rows=self.args.rows, shards=self.args.shards, tag=tag)
        self.seq += 1
        # the event after the write (a local object newer than its event reads as overwritten since)
        return entry(self.landing, key, datetime.now(UTC) + timedelta(seconds=1), f"{self.seq:016X}")

    def run(self, keys: list[str], *, overwrite: list[str] = ()) -> tuple[float, Any]:  # type: ignore[assignment]
        entries = [self._event(k, "v1") for k in keys] + [self._event(k, f"v{self.batch}") for k in overwrite]
        t = time.monotonic()
        record = self.job.run([manifest(entries, self.batch)], self.batch)
        seconds = time.monotonic() - t
        self.batch += 1
        self.loaded += keys
        return seconds, record

    def table_files(self) -> int:
        from glue_processor.table.read import current_files, load

        return len(current_files(load(self.settings)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.overwrites")
    p.add_argument("--batches", type=int, default=20, help="batches that build the table (default 20)")
    p.add_argument("--shards", type=int, default=50, help="partitions each batch writes a file to (default 50)")
    p.add_argument("--objects", type=int, default=40, help="objects per building batch (default 40)")
    p.add_argument("--rows", type=int, default=500, help="rows per object (default 500)")
    p.add_argument("--batch-objects", type=int, default=400, help="objects of a measured batch (default 400)")
    p.add_argument("--repeat", type=int, default=3, help="measured pairs; the median is shown (default 3)")
    p.add_argument("--cores", default="2")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "overwrites")
    args = p.parse_args(argv)
    from bench.jobs import session

    spark = session(args.cores)
    bench = Bench(spark, args.out, args)
    build = time.monotonic()
    for b in range(args.batches):
        bench.run([f"in/b{b:03d}/o{o:04d}.json" for o in range(args.objects)])
    files = bench.table_files()
    print(f"table: {files:,} data files from {args.batches} batches ({time.monotonic() - build:.0f} s to build)")
    plain: list[float] = []
    mirrored: list[tuple[float, Any]] = []
    overwrites = max(1, args.batch_objects // 100)
    for r in range(args.repeat):
        fresh = [f"in/new{r}/a{o:04d}.json" for o in range(args.batch_objects)]
        plain.append(bench.run(fresh)[0])
        # 1%: new versions of keys of earlier batches, one from each of `overwrites` batches
        old = [bench.loaded[(i * 7919 + r * 131) % (args.batches * args.objects)] for i in range(overwrites)]
        fresh = [f"in/new{r}/b{o:04d}.json" for o in range(args.batch_objects - overwrites)]
        mirrored.append(bench.run(fresh, overwrite=old))
    base = sorted(plain)[len(plain) // 2]
    seconds, record = sorted(mirrored, key=lambda x: x[0])[len(mirrored) // 2]
    rewrites = [r for s in record.tables for r in s.rewrites]
    removed = sum(s.stats.rows_removed for s in record.tables)
    rewrite_s = record.stats.stage_s.get(Stage.REWRITE, 0.0)
    rows = [
        ["no overwrite", f"{base:.2f}", "", "", "", ""],
        [
            f"{overwrites} of {args.batch_objects} overwritten (1%)",
            f"{seconds:.2f}",
            f"{seconds - base:+.2f}",
            f"{(seconds - base) / overwrites:.3f}",
            f"{len(rewrites)} ({sum(r.old_bytes for r in rewrites) / MB:.1f} MB)",
            f"{removed:,}",
        ],
    ]
    header = ["batch", "seconds", "vs none", "s per overwrite", "files rewritten", "rows removed"]
    print(f"measured batches of {args.batch_objects} objects, local[{args.cores}], median of {args.repeat}")
    print(aligned(header, rows))
    print(
        f"rewrite stage {rewrite_s:.2f} s; the table holds {bench.table_files():,} files: an overwrite rewrote "
        f"the {len(rewrites) // overwrites} files of its key's batch (one per partition), not the table"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
