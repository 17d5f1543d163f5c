"""``make bench`` (the serial-cost row): what a trigger of the 24/7 job spends outside its parallel
parse and write, once the job has run for a while.

``bench.stream`` measures each shape's second batch: the JVM is up and the tables are open, but
Spark's streaming code has run once and its JIT has compiled none of it. A job that has run for a
minute has. Here ``--batches`` manifests of one small object each (~70 kB of compact records, so
the parallel part is one short task) go through the real query (``run_query``: the file source,
``foreachBatch``, the commit record, the table and load-history commits, metrics) one per trigger,
in a fresh process pinned to one CPU with ``local[1]``; the figures are the medians of the last
half of the batches. Serial = ``BatchDuration`` (Spark's ``triggerExecution``) less the batch's
parallel stages (``read_parse_write``, ``write``), itemised: Spark's own steps (its trigger less
``addBatch``: offsets, WAL, planning, the commit log), the Python callback's entry (``addBatch`` less
the job's own time), the manifests' read, the plan, the commit record, the publication (the table
and history commits) and the report.

``python -m bench.serial [--batches 60] [--json .bench/serial.json]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.machine import probe
from glue_processor.local.text import aligned
from glue_processor.metrics.timing import Step

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".bench" / "serial"
TARGET_S = 0.3
OBJECT_RECORDS = 1_500  # ~70 kB of compact records an object

STEPS = ["Spark's steps", "callback", "manifests", "plan", "record", "publish", "report"]


def _objects(bucket: Path, manifests: Path, count: int) -> None:
    """``count`` objects of compact records and one manifest each (as bench.stream writes them:
    named as the Lambda names them, a second apart, so the file source takes them in order)."""
    from bench.stream import write_manifests

    bucket.mkdir(parents=True, exist_ok=True)
    files = []
    for n in range(count):
        path = bucket / f"part-{n:05d}.json"
        lines = (
            json.dumps({"id": n * OBJECT_RECORDS + i, "kind": "click", "v": i * 0.5}) for i in range(OBJECT_RECORDS)
        )
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    write_manifests(files, manifests, count)


def child(out: Path, batches: int) -> dict[str, Any]:
    """The batches through the real query; each one's serial part, itemised."""
    from bench.batch import local_job
    from glue_processor.batch import ManifestBatchJob
    from glue_processor.local.session import local_session
    from glue_processor.main import run_query
    from glue_processor.settings import settings_from_mapping

    out = out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    _objects(out / "objects" / "bkt", out / "manifests", batches)
    size = (out / "objects" / "bkt" / "part-00000.json").stat().st_size
    budget = str(size * 3 // 2)  # one manifest a trigger
    settings = settings_from_mapping(
        local_job(
            out,
            objects=out / "objects",
            trigger="available-now",
            max_bytes_per_trigger=budget,
            max_manifest_bytes=budget,
            metrics_sinks="jsonl",
            metrics_jsonl_path=str(out / "metrics.jsonl"),
        )
    )
    steps: dict[int, dict[str, float]] = {}
    call = ManifestBatchJob.__call__

    def timed(self: ManifestBatchJob, batch_df: Any, batch_id: int) -> None:
        try:
            call(self, batch_df, batch_id)
        finally:
            steps[batch_id] = dict(self.steps.seconds)

    ManifestBatchJob.__call__ = timed  # type: ignore[method-assign]
    spark = local_session(
        "bench-serial", cores="1", quiet=True, extra={"spark.sql.streaming.numRecentProgressUpdates": batches + 10}
    )
    run = run_query(spark, settings, records_kept=100_000, progress_kept=100_000)
    spark.stop()
    records = {r.batch_id: r for r in run.committed}
    progress = {int(p["batchId"]): p for p in run.progress}
    rows = []
    for batch_id in sorted(records):
        d = progress.get(batch_id, {}).get("durationMs", {})
        s = steps.get(batch_id, {})
        total, add = d.get("triggerExecution", 0) / 1000, d.get("addBatch", 0) / 1000
        parallel = records[batch_id].stats.parallel_s
        rows.append(
            {
                "batch": batch_id,
                "batch_s": total,
                "parallel_s": parallel,
                "serial_s": total - parallel,
                "Spark's steps": total - add,
                "callback": add - s.get(Step.TOTAL, add),
                "manifests": s.get(Step.COLLECT, 0.0),
                "plan": s.get(Step.PREPARE, 0.0) + s.get(Step.PLAN, 0.0),
                "record": s.get(Step.COMMIT_RECORD, 0.0),
                "publish": s.get(Step.PUBLISH, 0.0),
                "report": s.get(Step.REPORT, 0.0),
                "spark": d,
            }
        )
    return {"batches": rows}


def measure(batches: int, out: Path = OUT) -> dict[str, Any]:
    """The batches in a fresh process pinned to one CPU."""
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    cmd = [*pin, sys.executable, "-m", "bench.serial", "--child", str(out), "--batches", str(batches)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"bench.serial failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    return result


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Medians of the last half of the batches (the JIT has compiled the trigger's code by then)."""
    late = rows[len(rows) // 2 :]
    keys = ["batch_s", "parallel_s", "serial_s", *STEPS]
    return {k: statistics.median(r[k] for r in late) for k in keys}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.serial", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batches", type=int, default=150)
    p.add_argument("--json", type=Path, default=ROOT / ".bench" / "serial.json")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.batches)), flush=True)
        return 0
    result = measure(args.batches)
    rows = result["batches"]
    m = summary(rows)
    late = rows[len(rows) // 2 :]
    print(
        f"a trigger's serial cost, one core: medians of batches {late[0]['batch']}-{late[-1]['batch']} of {len(rows)}"
    )
    headers = ["BatchDuration s", "parallel s", "serial s", *(f"{k} s" for k in STEPS)]
    print(aligned(headers, [[f"{m[k]:.3f}" for k in ["batch_s", "parallel_s", "serial_s", *STEPS]]], left=0))
    verdict = "PASS" if m["serial_s"] < TARGET_S else "FAIL"
    print("(each column its own median: the items need not add up to the serial figure)")
    print(f"\nserial cost of a trigger {m['serial_s']:.3f} s (target < {TARGET_S} s): {verdict}")
    print(
        "on this machine: the checkpoint, the manifests' listing and the catalog on a local disk; on Glue "
        "they are S3 and Glue requests, so this is a lower bound for a Glue driver (docs/performance.md)"
    )
    machine = probe(OUT.parent)  # after the runs: its own file would warm the pages they take
    print(machine.line())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"summary": m, "machine": dataclasses.asdict(machine), **result}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
