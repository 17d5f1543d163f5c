"""``make bench-routing``: what routing to many tables costs a batch (issue 26).

Three datasets of different shapes under three prefixes (``orders/``: declared decimal, bigint and
timestamp columns, partitioned by ``day(ts)``; ``clicks/``: small records partitioned by the
record's ``country``; ``audit/``: wide, nested records), through the job's real batch path in one
process:

- **routed**: one batch of all three, routed to three tables by a routing file;
- **one table each**: each dataset alone, in a batch of its own, to its table with the same settings;
- **one table**: all three in one batch to one table (no routing, no declared types or partitions).

Each is run cold once, then warm ``--repeat`` times, interleaved; the best warm batch is shown. A
table's speed is its MB over the time spent on it: alone, its batch; routed, its share of the routed
batch, in proportion to the time it takes alone (the tables run together in one Spark job, so a
table's own time in it cannot be read off; this share says what routing costs or saves each table).

    python -m bench.routing [--mb 96] [--repeat 3]
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

from bench.batch import batch_job
from bench.shapes import write_ndjson
from glue_processor.local.text import aligned

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
BUCKET = "landing"
ROUTING = {
    "tables": {
        "orders": {
            "columns": {"amount": "decimal(12,2)", "qty": "bigint", "ts": "timestamp"},
            "partition_by": "day(ts)",
        },
        "clicks": {"columns": {"country": "string"}, "partition_by": "country"},
        "audit": {},
    },
    "routes": [
        {"prefix": "orders/", "table": "orders"},
        {"prefix": "clicks/", "table": "clicks"},
        {"prefix": "audit/", "table": "audit"},
    ],
    "unmatched": "ignore",
}


def _orders(rng: random.Random, n: int) -> dict[str, Any]:
    ts = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(7 * 86400))
    return {
        "id": f"o-{n}",
        "amount": f"{rng.uniform(0, 900):.2f}",
        "qty": rng.randrange(1, 20),
        "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "customer": f"c-{rng.randrange(50_000)}",
        "status": rng.choice(["new", "paid", "shipped", "refunded"]),
    }


def _clicks(rng: random.Random, n: int) -> dict[str, Any]:
    return {"id": n, "country": rng.choice(["fr", "de", "es", "it", "pl", "nl"]), "path": f"/p/{rng.randrange(900)}"}


def _audit(rng: random.Random, n: int) -> dict[str, Any]:
    record: dict[str, Any] = {"id": f"a-{n}", "actor": {"user": f"u{rng.randrange(999)}", "roles": ["r1", "r2"]}}
    record.update({f"field_{i:02d}": f"value {rng.randrange(10**6)} for {i}" for i in range(40)})
    return record


DATASETS = {"orders": _orders, "clicks": _clicks, "audit": _audit}


def generate(root: Path, *, mb_each: int, file_mb: int = 8, seed: int = 26) -> dict[str, list[Path]]:
    """``mb_each`` MB of each dataset under ``root/<bucket>/<dataset>/`` (cached by a stamp)."""
    stamp = root / f".done-{mb_each}-{file_mb}-{seed}"
    folders = {name: root / BUCKET / name for name in DATASETS}
    if stamp.exists():
        return {name: sorted(folder.glob("*.json")) for name, folder in folders.items()}
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(seed)  # noqa: S311 - reproducible data
    out = {}
    for name, make in DATASETS.items():
        folders[name].mkdir(parents=True)
        line_of = lambda r, n, make=make: json.dumps(make(r, n), separators=(",", ":"))  # noqa: E731
        out[name] = write_ndjson(folders[name], line_of, rng, total_mb=mb_each, file_mb=file_mb)
    stamp.touch()
    return out


def manifest(files: list[Path], landing: Path) -> tuple[str, str]:
    from contracts.manifest import Manifest, ManifestEntry

    now = datetime.now(UTC)
    entries = [
        ManifestEntry(
            bucket=BUCKET,
            key=p.relative_to(landing).as_posix(),
            size=p.stat().st_size,
            etag=hashlib.md5(p.name.encode()).hexdigest(),
            event_time=now,
        )
        for p in files
    ]
    return ("file:///bench/routing/manifest.json", Manifest.of(entries).to_json().decode())


def run_batch(spark: Any, root: Path, files: list[Path], out: Path, routing: dict[str, Any] | None) -> dict[str, Any]:
    """One batch of ``files`` into a fresh output (``routing``: a routing file's content; None: one
    table, every column a string)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    settings = {"source_uri_template": f"{root.as_uri()}/{{bucket}}/{{key}}"}
    if routing is not None:
        (out / "routes.json").write_text(json.dumps(routing), encoding="utf-8")
        settings["routes"] = (out / "routes.json").as_uri()
    job = batch_job(spark, files, out, "bench-routing", settings=settings)
    t0 = time.monotonic()
    record = job.run([manifest(files, root / BUCKET)], 0)
    seconds = time.monotonic() - t0
    return {
        "seconds": seconds,
        "records": record.stats.records_out,
        "files": record.stats.output_files,
        "tables": {s.table: s.stats.records_out for s in record.tables},
    }


def only(name: str) -> dict[str, Any]:
    """The routing of one dataset's table alone (the same table settings as routed)."""
    route = next(r for r in ROUTING["routes"] if r["table"] == name)
    return {"tables": {name: ROUTING["tables"][name]}, "routes": [route], "unmatched": "ignore"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.routing")
    p.add_argument("--mb", type=int, default=96, help="MB of each of the three datasets (default 96)")
    p.add_argument("--repeat", type=int, default=3, help="warm rounds; the best of each is shown (default 3)")
    p.add_argument("--cores", default="2")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "routing")
    args = p.parse_args(argv)
    from bench.jobs import session

    data = generate(args.out / f"data-{args.mb}", mb_each=args.mb)
    root = args.out / f"data-{args.mb}"
    everything = [f for files in data.values() for f in files]
    spark = session(args.cores)
    runs = {"routed": (everything, ROUTING), "one table": (everything, None)}
    runs.update({f"alone: {name}": (files, only(name)) for name, files in data.items()})
    best: dict[str, dict[str, Any]] = {}
    run_batch(spark, root, everything, args.out / "runs" / "cold", ROUTING)  # JVM, imports, first tasks
    for _ in range(args.repeat):
        for label, (files, routing) in runs.items():
            r = run_batch(spark, root, files, args.out / "runs" / label.replace(": ", "-").replace(" ", "-"), routing)
            if label not in best or r["seconds"] < best[label]["seconds"]:
                best[label] = r
    mb = {name: sum(f.stat().st_size for f in files) / MB for name, files in data.items()}
    total = sum(mb.values())
    routed = best["routed"]["seconds"]
    singles = sum(best[f"alone: {n}"]["seconds"] for n in data)
    rows = []
    for name in data:
        alone = best[f"alone: {name}"]["seconds"]
        share = routed * alone / singles  # its part of the routed batch, by what it costs alone
        rows.append(
            [
                name,
                f"{mb[name]:.0f}",
                f"{alone:.2f}",
                f"{mb[name] / alone:.1f}",
                f"{share:.2f}",
                f"{mb[name] / share:.1f}",
                f"{alone / share:.2f}",
            ]
        )
    print(f"three datasets of ~{args.mb} MB, local[{args.cores}], best warm batch of {args.repeat}")
    header = ["table", "MB", "alone s", "alone MB/s", "routed share s", "routed MB/s", "routed / alone speed"]
    print(aligned(header, rows))
    print(
        f"routed: one batch of {total:.0f} MB to 3 tables in {routed:.2f} s ({total / routed:.1f} MB/s), "
        f"{best['routed']['files']} files; the three alone: {singles:.2f} s in all (routed / alone "
        f"{routed / singles:.2f}); one table, no routing: {best['one table']['seconds']:.2f} s "
        f"(routed / one table {routed / best['one table']['seconds']:.2f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
