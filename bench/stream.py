"""``make bench`` (the stream's rows): the job as it streams, per producer shape, on one core.

For each shape, two manifests of ~120 MB of NDJSON go through the real query (``run_query``: the
file source, ``foreachBatch``, the commit record, the table and load-history commits, metrics), one
batch each, in a fresh process pinned to one CPU with ``local[1]``. The second batch is warm (the JVM,
the modules and the table open, as a 24/7 job's batches are). Per warm batch it reports:

- ``BatchDuration`` (Spark's ``triggerExecution``: everything the stream pays for the batch) and the
  MB/s per core it makes;
- the parallel part: the stages that run as Spark tasks (``read_parse_write``, ``write``);
- the serial part: all the rest, on the driver while executors wait (Spark's offsets, WAL and
  planning, the manifests' collect and plan, the commit record, the table and history commits,
  the report), itemised as far as the job times it.

With ``--rules`` each batch also checks the five rules of ``bench/five-rules.json`` (over the ``id``
most shapes have and the lineage; no row breaks them, as in a healthy stream), and the table gains
what they cost: the seconds the parse tasks spent in them, and their share of the batch.
``--rules bench/every-row-breaks.json``: the worst day, a rule every row breaks (each row a row of the
quarantine table).

``--duckdb``: per shape, DuckDB on the warm batch's files too, in a fresh process pinned to the same
CPUs with as many threads, declared the columns the warm batch's table has (VARCHAR: keys past them
it drops, where ours keeps them in ``_extra``), writing snappy Parquet; best of two. It has no
lineage, quarantine or exactly-once to pay for.

``python -m bench.stream [--shapes a,b] [--mb 120] [--cores 1] [--rules [FILE]] [--duckdb]``; rows slowest
first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.machine import probe
from bench.shapes import SHAPES, generate
from contracts.ledger import Stage
from contracts.metrics import TABLE_COMMIT_DURATION, TABLE_DIMENSION
from glue_processor.local.text import aligned
from glue_processor.metrics.timing import Step

MB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".bench" / "stream"
FILE_MB = 8
FIVE_RULES = ROOT / "bench" / "five-rules.json"
# issue 45's floor for every shape, warm, on one core
FLOOR_MB_S = 60.0


def split(files: list[Path], parts: int) -> list[list[Path]]:
    """``files`` in ``parts`` runs, the last taking the rest: a manifest's files each."""
    per = max(1, len(files) // parts)
    return [files[n * per : (n + 1) * per] if n < parts - 1 else files[n * per :] for n in range(parts)]


def write_manifests(files: list[Path], into: Path, parts: int) -> None:
    """``parts`` manifests over ``files``, named as the Lambda names them, a second apart."""
    from bench.batch import entries_of
    from contracts.layout import manifest_key
    from contracts.manifest import Manifest

    into.mkdir(parents=True, exist_ok=True)
    for n, chunk in enumerate(split(files, parts)):
        manifest = Manifest.of(entries_of(chunk))
        path = into / manifest_key("", manifest)
        path.write_bytes(manifest.to_json())
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))


def child(data: Path, out: Path, cores: str, batch_mb: int, *, rules: Path | None = None) -> dict[str, Any]:
    """One shape's two batches through the real query; the figures of each batch."""
    from bench.batch import local_job
    from glue_processor.local.session import local_session
    from glue_processor.main import run_query
    from glue_processor.settings import settings_from_mapping

    files = sorted(data.glob("*.json"))
    write_manifests(files, out / "manifests", 2)
    budget = str(int(batch_mb * 1.5 * MB))  # one manifest a trigger
    settings = settings_from_mapping(
        local_job(
            out,
            objects=data.parent,
            trigger="available-now",
            max_bytes_per_trigger=budget,
            max_manifest_bytes=budget,
            metrics_sinks="jsonl",
            metrics_jsonl_path=str(out / "metrics.jsonl"),
            **({"expect": rules.resolve().as_uri()} if rules else {}),
        )
    )
    spark = local_session("bench-stream", cores=cores, driver_memory="4g", quiet=True)
    run = run_query(spark, settings, records_kept=100_000, progress_kept=100_000)
    spark.stop()
    records = {r.batch_id: r for r in run.committed}
    steps = run.last.steps.seconds if run.last else {}  # the last batch's driver steps
    progress = {int(p["batchId"]): p for p in run.progress}
    points = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    commits = batch_commits(points)
    out_rows = []
    for batch_id in sorted(records):
        r, p = records[batch_id], progress.get(batch_id, {})
        d = p.get("durationMs", {})
        stages = dict(r.stats.stage_s)
        parallel = r.stats.parallel_s
        total = d.get("triggerExecution", 0) / 1000
        out_rows.append(
            {
                "batch": batch_id,
                "mb": r.stats.input_bytes / MB,
                "batch_s": total,
                "add_batch_s": d.get("addBatch", 0) / 1000,
                "spark_s": (d.get("triggerExecution", 0) - d.get("addBatch", 0)) / 1000,
                "parallel_s": parallel,
                "serial_s": total - parallel,
                "stages": stages,
                "job_s": r.stats.duration_s,
                "commit_ms": commits[len(out_rows)] if len(commits) == len(records) else None,
                "records": r.stats.records_out,
                "out_mb": r.stats.output_bytes / MB,
                "spark": d,
                "steps": steps if batch_id == max(records) else {},
            }
        )
    return {"batches": out_rows}


def batch_commits(points: list[dict[str, Any]]) -> list[float]:
    """Each batch's ``TableCommitDuration`` (ms): the point without a ``Table`` dimension, the whole
    batch's (record and every table's publication); the per-table points beside it are one table's."""
    return [
        p["value"] for p in points if p["name"] == TABLE_COMMIT_DURATION.name and TABLE_DIMENSION not in p["dimensions"]
    ]


def verdict(rates: list[tuple[float, str]], floor: float = FLOOR_MB_S) -> str:
    """How many shapes make ``floor`` MB/s per core, and which do not (with their rates)."""
    under = [f"{shape} {rate:.1f}" for rate, shape in sorted(rates) if rate < floor]
    line = f"shapes at {floor:.0f} MB/s per core or more: {len(rates) - len(under)} of {len(rates)}"
    return line + (f"; under it: {', '.join(under)}" if under else "")


STAGE_HEADERS = [
    "shape",
    "Spark: offsets, plan, WAL",
    "foreachBatch",
    "collect",
    "plan",
    "parse (tasks)",
    "write (tasks)",
    "record",
    "publish",
    "report",
]


def stage_row(shape: str, w: dict[str, Any]) -> list[str]:
    """A warm batch's time by stage: Spark's own steps (its trigger less ``addBatch``), the Python
    callback's entry (``addBatch`` less the job's own time), then the job's driver steps and stages."""
    steps, stages = w.get("steps", {}), w["stages"]
    callback = w["add_batch_s"] - steps.get(Step.TOTAL, w["add_batch_s"])
    return [
        shape,
        f"{w['spark_s']:.2f}",
        f"{callback:.2f}",
        f"{steps.get(Step.COLLECT, 0):.2f}",
        f"{steps.get(Step.PREPARE, 0) + steps.get(Step.PLAN, 0):.2f}",
        f"{stages.get(Stage.READ_PARSE_WRITE, 0):.2f}",
        f"{stages.get(Stage.WRITE, 0):.2f}",
        f"{steps.get(Step.COMMIT_RECORD, 0):.3f}",
        f"{steps.get(Step.PUBLISH, 0):.3f}",
        f"{steps.get(Step.REPORT, 0):.3f}",
    ]


def _cpus(cores: str) -> str:
    """The first ``cores`` CPUs, as taskset lists them."""
    return ",".join(str(c) for c in range(int(cores)))


def _pinned(cores: str) -> list[str]:
    """The command prefix that pins a child process to the first ``cores`` CPUs (none without taskset)."""
    return ["taskset", "-c", _cpus(cores)] if shutil.which("taskset") else []


def measure(shape: str, *, mb: int, cores: str, rules: Path | None = None, root: Path = DATA) -> dict[str, Any]:
    """One shape's two batches in a fresh process pinned to ``cores`` CPUs; its data and runs under
    ``root`` (a bench of another batch size keeps its own: the data is cached by size)."""
    data = root / shape / "bkt"
    generate(data, shape, total_mb=2 * mb, file_mb=FILE_MB)
    out = root / "runs" / f"{shape}-{cores}"
    shutil.rmtree(out, ignore_errors=True)
    # what the shapes before wrote goes to disk now, not in the kernel's writeback during this one
    # (~250 MB of Parquet each: the last shapes of a run were up to 1.7x slower without this)
    os.sync()
    cmd = [sys.executable, "-m", "bench.stream", "--child", str(data), "--out", str(out), "--cores", cores]
    cmd += ["--mb", str(mb), *(["--rules", str(rules)] if rules else [])]
    proc = subprocess.run([*_pinned(cores), *cmd], cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{shape} failed:\n{proc.stderr[-4000:]}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {"shape": shape, **lines[-1]}


def _literal(text: object) -> str:
    """``text`` as an SQL string literal."""
    return "'" + str(text).replace("'", "''") + "'"


def duckdb_child(files: list[Path], columns: list[str], out: Path, threads: int) -> dict[str, Any]:
    """DuckDB over ``files``, ``columns`` declared VARCHAR, to one snappy Parquet file: best of two
    (what the first wrote is on disk before the second starts)."""
    import time

    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads TO {int(threads)}")
    declared = "{" + ", ".join(f"{_literal(c)}: 'VARCHAR'" for c in columns) + "}"
    paths = "[" + ", ".join(_literal(p) for p in files) + "]"
    out.mkdir(parents=True, exist_ok=True)
    target = out / "duckdb.parquet"
    query = f"SELECT * FROM read_ndjson({paths}, columns={declared})"
    times = []
    for _ in range(2):
        os.sync()
        began = time.perf_counter()
        con.execute(f"COPY ({query}) TO {_literal(target)} (FORMAT parquet, COMPRESSION snappy)")
        times.append(time.perf_counter() - began)
    return {"seconds": min(times), "mb": sum(f.stat().st_size for f in files) / MB, "columns": len(columns)}


def table_columns(out: Path) -> list[str]:
    """The data columns of the warm batch's table (its newest file with lineage: not the load
    history's), lineage and ``_extra`` left out. Declared to DuckDB by these names, which are the
    keys' own for the bench's shapes (none has a key the job renames: an empty one, case variants)."""
    import pyarrow.parquet as pq

    from glue_processor.shared.names import LINEAGE_COLUMNS, RESERVED_COLUMNS

    files = [(f.stat().st_mtime, pq.read_schema(f).names) for f in (out / "data").rglob("*.parquet")]
    tables = [(t, names) for t, names in files if LINEAGE_COLUMNS[0] in names]
    if not tables:
        raise RuntimeError(f"no data file of the table under {out / 'data'}: did the shape's run fail?")
    return [n for n in max(tables)[1] if n not in RESERVED_COLUMNS]


def measure_duckdb(shape: str, *, cores: str) -> dict[str, Any]:
    """DuckDB on the files of the shape's warm batch, after :func:`measure` ran it (the child
    syncs what that wrote before each COPY, as between shapes)."""
    data, out = DATA / shape / "bkt", DATA / "runs" / f"{shape}-{cores}"
    spec = {"files": [str(f) for f in split(sorted(data.glob("*.json")), 2)[-1]], "columns": table_columns(out)}
    (out / "duckdb.json").write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "bench.stream", "--duckdb-child", str(out / "duckdb.json"), "--cores", cores]
    proc = subprocess.run([*_pinned(cores), *cmd], cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{shape} (DuckDB) failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.splitlines()[-1]))


def _rules_cells(w: dict[str, Any], cores: int) -> list[str]:
    """The task seconds the rules took (a part of the parse; over the cores, as the tasks share
    them), and their share of the batch."""
    seconds = w["stages"].get(Stage.RULES, 0.0) / max(1, cores)
    return [f"{seconds:.2f}", f"{100 * seconds / w['batch_s']:.1f}" if w["batch_s"] else "-"]


def _duckdb_cells(w: dict[str, Any], cores: int) -> list[str]:
    """DuckDB's seconds on the warm batch's files, its MB/s per core, and ours against it (its time
    over our ``BatchDuration``: above 1, ours is faster)."""
    d = w["duckdb"]
    return [f"{d['seconds']:.2f}", f"{d['mb'] / d['seconds'] / cores:.1f}", f"{d['seconds'] / w['batch_s']:.2f}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.stream", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--mb", type=int, default=120, help="MB per batch (two batches per shape)")
    p.add_argument("--cores", default="1")
    p.add_argument(
        "--rules", type=Path, nargs="?", const=FIVE_RULES, help=f"check rules too (default {FIVE_RULES.name})"
    )
    p.add_argument("--duckdb", action="store_true", help="DuckDB on each warm batch's files too")
    p.add_argument("--json", type=Path, default=ROOT / ".bench" / "stream.json")
    p.add_argument("--duckdb-child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.out, args.cores, args.mb, rules=args.rules)), flush=True)
        return 0
    if args.duckdb_child:
        spec = json.loads(args.duckdb_child.read_text())
        got = duckdb_child([Path(f) for f in spec["files"]], spec["columns"], args.duckdb_child.parent, int(args.cores))
        print(json.dumps(got), flush=True)
        return 0
    results = []
    for shape in (s for s in args.shapes.split(",") if s):
        results.append(measure(shape, mb=args.mb, cores=args.cores, rules=args.rules))
        if args.duckdb:
            results[-1]["duckdb"] = measure_duckdb(shape, cores=args.cores)
    rows = []
    for r in results:
        warm = r["batches"][-1]
        rows.append((warm["mb"] / warm["batch_s"] / int(args.cores), r["shape"], {**warm, "duckdb": r.get("duckdb")}))
    rows.sort(key=lambda x: x[0])
    headers = ["shape", "MB", "BatchDuration s", "MB/s/core", "parallel s", "serial s", "Spark s", "commit ms"]
    if args.rules:
        headers += ["rules s", "rules %"]
    if args.duckdb:
        headers += ["DuckDB s", "DuckDB MB/s/core", "ours/DuckDB"]
    table = [
        [
            shape,
            f"{w['mb']:.0f}",
            f"{w['batch_s']:.2f}",
            f"{rate:.1f}",
            f"{w['parallel_s']:.2f}",
            f"{w['serial_s']:.2f}",
            f"{w['spark_s']:.2f}",
            f"{w['commit_ms']:.0f}" if w["commit_ms"] is not None else "-",
            *(_rules_cells(w, int(args.cores)) if args.rules else []),
            *(_duckdb_cells(w, int(args.cores)) if args.duckdb else []),
        ]
        for rate, shape, w in rows
    ]
    with_rules = f", checking the rules of {args.rules.name}" if args.rules else ""
    print(f"the stream, warm batch of ~{args.mb} MB per shape on {args.cores} core(s){with_rules}, slowest first")
    print(aligned(headers, table, left=1))
    print(verdict([(rate, shape) for rate, shape, _ in rows]))
    print("\nwhere a warm batch's time goes (s), slowest first")
    print(aligned(STAGE_HEADERS, [stage_row(shape, w) for _, shape, w in rows], left=1))
    serial = sorted(w["serial_s"] for _, _, w in rows)
    print(
        "\nserial cost of a warm batch (all but its parallel parse and write): "
        f"median {serial[len(serial) // 2]:.2f} s, {serial[0]:.2f}-{serial[-1]:.2f} s over {len(serial)} shapes"
    )
    machine = probe(DATA, cpus=_cpus(args.cores))  # after the runs: its own file would warm the pages they take
    print(machine.line())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": dataclasses.asdict(machine), "shapes": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
