"""Fault injection: kill the local pipeline's whole process tree (SIGKILL) again and again, restart
it from its checkpoint each time, then prove every input record is in the output exactly once.

Kills land at random moments (reading, writing, checkpointing: wherever the clock says) and at
the job's named fail points (``glue_processor.faults``): after the read, after staging Parquet,
after the commit record, in the middle of publishing, and after the batch (before Spark's
checkpoint commit). New files arrive between rounds, as in production.

``make reliability`` runs 20 kills; the test suite runs a smaller round.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

POINTS = (
    "after-read",
    "after-stage",
    "after-commit-record",
    "before-table-commit",
    "mid-publish",
    "before-key-index",
    "after-batch",
)
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ChaosReport:
    kills: int = 0
    kills_by_moment: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    clean_runs: int = 0
    files: int = 0
    records_in: int = 0
    records_out: int = 0
    duplicates: int = 0
    lost: int = 0
    unexpected: int = 0
    visible_staged_files: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.kills > 0 and self.duplicates == 0 and self.lost == 0 and self.unexpected == 0

    def text(self) -> str:
        moments = ", ".join(f"{k} {v}" for k, v in sorted(self.kills_by_moment.items()))
        return (
            f"kills: {self.kills} ({moments}); restarts: {self.restarts}; files: {self.files}; "
            f"records in: {self.records_in}; records out: {self.records_out}; duplicates: {self.duplicates}; "
            f"lost: {self.lost}; unexpected: {self.unexpected}; in {self.seconds:.0f} s -> "
            + ("PASS" if self.ok else "FAIL")
        )


# with --routes: three datasets under three prefixes, each to a table of its own
ROUTED = ("alpha", "beta", "gamma")
ROUTES = {
    "tables": {t: {} for t in ROUTED},
    "routes": [{"prefix": f"round/{t}/", "table": t} for t in ROUTED],
    "unmatched": "ignore",
}


def _write_files(
    data: Path, rng: random.Random, start: int, count: int, records: int, *, routed: bool = False
) -> dict[str, int]:
    written = {}
    for i in range(start, start + count):
        rel = f"round/{ROUTED[i % 3]}/{i:04d} file ü+%.json" if routed else f"round/{i:04d} file ü+%.json"
        lines = [json.dumps({"file": i, "n": n, "pad": rng.randbytes(40).hex()}) for n in range(records)]
        path = data / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written[rel] = records
    return written


def _run(args: list[str], *, fault: str | None, kill_after: float | None, timeout: float = 600) -> int:
    env = dict(os.environ)
    env.pop("INGEST_FAULT", None)
    if fault:
        env["INGEST_FAULT"] = fault
    proc = subprocess.Popen(
        [sys.executable, "-m", "glue_processor.local.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        if kill_after is not None:
            try:
                return proc.wait(timeout=kill_after)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_chaos(
    workdir: Path,
    *,
    kills: int,
    files_per_round: int = 3,
    records: int = 40,
    seed: int = 11,
    table_format: str = "iceberg",
    routed: bool = False,
) -> ChaosReport:
    """Kill until ``kills`` kills happened, then drain cleanly and check the output by lineage
    (``routed``: three datasets to three tables, each row in its own table exactly once)."""
    import pyarrow.parquet as pq

    from glue_processor.table.read import published_files

    rng = random.Random(seed)  # noqa: S311 - reproducible chaos, not cryptography
    data, work = workdir / "data", workdir / "work"
    expected: dict[str, int] = {}
    report = ChaosReport()
    started = time.monotonic()
    args = ["--data", str(data), "--workdir", str(work), "--sqs-batch-size", "1", "--max-files-per-trigger", "1"]
    args += ["--table-format", table_format]
    if routed:
        routes = workdir / "routes.json"
        routes.parent.mkdir(parents=True, exist_ok=True)
        routes.write_text(json.dumps(ROUTES), encoding="utf-8")
        args += ["--routes", str(routes)]
    n = 0
    rounds = 0
    while report.kills < kills and rounds < kills * 4:
        rounds += 1
        expected.update(_write_files(data, rng, n, files_per_round, records, routed=routed))
        n += files_per_round
        if rng.random() < 0.5:
            moment, fault, after = "random-time", None, rng.uniform(1.0, 14.0)
        else:
            moment, fault, after = rng.choice(POINTS), None, None
            fault = f"{moment}:0.5"
        code = _run(args, fault=fault, kill_after=after)
        if code == -signal.SIGKILL:
            report.kills += 1
            report.restarts += 1
            report.kills_by_moment[moment] = report.kills_by_moment.get(moment, 0) + 1
        elif code == 0:
            report.clean_runs += 1
        else:
            raise RuntimeError(f"the local run failed with exit code {code} (not a kill)")
    if _run(args, fault=None, kill_after=None) != 0:
        raise RuntimeError("the final clean run failed")
    report.clean_runs += 1

    seen: dict[tuple[str, int], int] = {}
    published = []
    for table in ROUTED if routed else ("events",):
        files = published_files(work / "output", table_name=table)
        published += files
        for path in files:
            for row in pq.ParquetFile(path).read(columns=["_source_uri", "_line"]).to_pylist():
                # routed: a row counts only in the table its key is routed to
                key = (
                    (row["_source_uri"], row["_line"])
                    if not routed or f"/round/{table}/" in row["_source_uri"]
                    else ("", 0)
                )
                seen[key] = seen.get(key, 0) + 1
    want = {(f"s3://local-landing/{rel}", line) for rel, count in expected.items() for line in range(1, count + 1)}
    report.files = len(expected)
    report.records_in = len(want)
    report.records_out = sum(seen.values())
    report.duplicates = sum(c - 1 for c in seen.values() if c > 1)
    report.lost = len(want - set(seen))
    report.unexpected = len(set(seen) - want)
    report.visible_staged_files = sum(1 for p in published if "_staging" in str(p))
    report.seconds = time.monotonic() - started
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="chaos", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workdir", type=Path, default=Path(".work-chaos"))
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--table-format", choices=["iceberg", "hive-parquet"], default="iceberg")
    p.add_argument("--routed", action="store_true", help="three datasets routed to three tables")
    args = p.parse_args(argv)
    import shutil

    shutil.rmtree(args.workdir, ignore_errors=True)
    report = run_chaos(
        args.workdir, kills=args.kills, seed=args.seed, table_format=args.table_format, routed=args.routed
    )
    print(report.text())
    if args.json:
        args.json.write_text(json.dumps({**asdict(report), "ok": report.ok}, indent=1))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
