"""The seed post's "initial benchmark": per-core throughput by batch size, then a sizing.

Stress batches run on one core (``local[1]``) with increasing batch limits (files per batch), warm,
back to back, then the largest ones again on two cores (``local[2]``): the scaling the batch path
actually shows from one core to two is the efficiency the sizing uses (it assumed 70 % before).
From batch duration and throughput it recommends
the trigger interval, maxFilesPerTrigger, Glue worker type and count for a volume (files per hour,
average file size) and a latency SLA (batch duration under half the SLA), with the monthly cost.

    python -m bench.sizing --files-per-hour 200000 --file-kb 3500 --sla-s 600
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.data import record

MB = 1024 * 1024
DPU_PRICE = 0.44  # USD per DPU-hour (Glue streaming, us-east-1)
HOURS_PER_MONTH = 730
# worker type -> (vCPUs usable as Spark cores, DPUs)
WORKERS = {"G.025X": (2, 0.25), "G.1X": (4, 1.0), "G.2X": (8, 2.0)}
HEADROOM = 1.3  # capacity above the average volume, for peaks
TARGET_UTILIZATION = 0.6  # as lambdas/control_plane/settings.py's target_utilization


@dataclass
class Point:
    files: int
    mb: float
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.mb / self.seconds


def make_files(root: Path, count: int, file_kb: int) -> list[Path]:
    import random

    rng = random.Random(7)  # noqa: S311
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    seq = 0
    for i in range(count):
        path = root / f"f{i:05d}.json"
        lines = []
        size = 0
        while size < file_kb * 1024:
            line = json.dumps(record(rng, seq), separators=(",", ":"))
            lines.append(line)
            size += len(line) + 1
            seq += 1
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def measure(work: Path, limits: list[int], file_kb: int, repeats: int, *, cores: int = 1) -> list[Point]:
    from bench.batch import batch_job, manifest_of
    from glue_processor.local.session import local_session

    spark = local_session("sizing", cores=str(cores), driver_memory="6g")
    files = make_files(work / "data", max(limits), file_kb)
    points = []
    batch_id = 0
    warm_job = None
    for limit in [limits[0], *limits]:  # the first run warms the JVM and is discarded
        durations = []
        for _ in range(repeats):
            out = work / "out" / f"{batch_id}"
            job = batch_job(spark, files, out, f"size{batch_id}", previous=warm_job)
            t0 = time.monotonic()
            job.run([manifest_of(files[:limit])], batch_id)
            durations.append(time.monotonic() - t0)
            warm_job = job
            batch_id += 1
            shutil.rmtree(out, ignore_errors=True)
        if warm_job is not None and batch_id > repeats:
            mb = sum(p.stat().st_size for p in files[:limit]) / MB
            points.append(Point(limit, round(mb, 2), round(sorted(durations)[len(durations) // 2], 3)))
    spark.stop()
    return points


def fit(points: list[Point]) -> tuple[float, float]:
    """Least squares: duration = overhead_s + mb / per_core_mb_s."""
    n = len(points)
    xs, ys = [p.mb for p in points], [p.seconds for p in points]
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / max(1e-9, sum((x - mx) ** 2 for x in xs))
    if slope <= 0:  # batches too small to see the per-MB cost: fall back to the best observed rate
        return min(ys), max(p.mb_per_s for p in points)
    overhead = max(0.0, my - slope * mx)
    return overhead, 1 / slope


def scaling_efficiency(one_core: list[Point], two_cores: list[Point]) -> float:
    """Measured: the two-core rate over twice the one-core rate (1.0 is linear), on the same batches."""
    _, rate1 = fit(one_core)
    _, rate2 = fit(two_cores)
    return max(0.05, min(1.0, rate2 / (2 * rate1)))


def recommend(
    points: list[Point],
    *,
    files_per_hour: int,
    file_kb: int,
    sla_s: float,
    efficiency: float,
    files_per_manifest: int = 1000,
) -> dict[str, Any]:
    overhead_s, core_mb_s = fit(points)
    need_mb_s = files_per_hour * file_kb / 1024 / 3600
    budget_s = sla_s / 2  # worst case latency ~ interval + batch duration
    options = []
    for wtype, (cores, dpu) in WORKERS.items():
        for workers in range(2, 300):
            executor_cores = (workers - 1) * cores  # one worker is the driver
            cluster_mb_s = executor_cores * core_mb_s * efficiency
            if cluster_mb_s < need_mb_s * HEADROOM:
                continue
            # trigger interval: the data of one interval must be processed within the interval
            interval = max(10, math.ceil(budget_s / 2))
            batch_mb = need_mb_s * HEADROOM * interval
            duration = overhead_s + batch_mb / cluster_mb_s
            # leave the control plane's headroom: run at its target utilization, not at capacity
            if duration > budget_s or duration > TARGET_UTILIZATION * interval:
                continue
            files_per_batch = files_per_hour * HEADROOM * interval / 3600
            options.append(
                {
                    "worker_type": wtype,
                    "workers": workers,
                    "trigger_interval_s": interval,
                    "max_files_per_trigger": max(1, math.ceil(files_per_batch / files_per_manifest)),
                    "expected_batch_s": round(duration, 1),
                    "utilization": round(duration / interval, 2),
                    "monthly_usd": round(workers * dpu * DPU_PRICE * HOURS_PER_MONTH),
                }
            )
            break
    best = min(options, key=lambda o: o["monthly_usd"]) if options else None
    return {
        "volume_mb_s": round(need_mb_s, 2),
        "per_core_mb_s": round(core_mb_s, 2),
        "batch_overhead_s": round(overhead_s, 2),
        "scaling_efficiency": round(efficiency, 2),
        "options": options,
        "recommended": best,
    }


def plot(points: list[Point], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([p.files for p in points], [p.seconds for p in points], "o-", label="batch duration (s)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("files per batch (batch limit)")
    ax.set_ylabel("seconds, one core")
    ax2 = ax.twinx()
    ax2.plot([p.files for p in points], [p.mb_per_s for p in points], "s--", color="tab:orange", label="MB/s per core")
    ax2.set_ylabel("MB/s per core")
    fig.legend(loc="upper left")
    ax.set_title("Stress batches on one core")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def pinned(args: argparse.Namespace, limits: list[int], *, cores: int) -> list[Point]:
    """``measure`` in a process of its own pinned to ``cores`` CPUs: the JVM and the Python workers
    it starts share them, so one core is one core's worth of the whole job (in one process the
    JVM would keep the CPUs it started with)."""
    cmd = [sys.executable, "-m", "bench.sizing", "--measure-cores", str(cores), "--out", str(args.out)]
    cmd += ["--limits", ",".join(map(str, limits)), "--file-kb", str(args.file_kb), "--repeats", str(args.repeats)]
    pin = ["taskset", "-c", ",".join(str(c) for c in range(cores))] if shutil.which("taskset") else []
    out = subprocess.run([*pin, *cmd], capture_output=True, text=True, check=True)
    return [Point(**x) for x in json.loads(out.stdout.strip().splitlines()[-1])]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sizing", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--files-per-hour", type=int, default=200_000)
    p.add_argument("--file-kb", type=int, default=1024, help="average NDJSON file size in KB")
    p.add_argument("--sla-s", type=float, default=600, help="latency SLA, S3 event to Parquet")
    p.add_argument("--limits", default="1,2,4,8,16,32,64,128")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path(".bench/sizing"))
    p.add_argument("--measure-cores", type=int, default=0, help=argparse.SUPPRESS)  # one pinned measurement
    args = p.parse_args(argv)
    args.out = args.out.resolve()
    limits = [int(x) for x in args.limits.split(",")]
    if args.measure_cores:
        found = measure(
            args.out / f"cores-{args.measure_cores}", limits, args.file_kb, args.repeats, cores=args.measure_cores
        )
        print(json.dumps([asdict(x) for x in found]))
        return 0
    shutil.rmtree(args.out, ignore_errors=True)
    points = pinned(args, limits, cores=1)
    # the same batch sizes where the per-MB cost shows (the larger half), on two cores
    two = pinned(args, limits[len(limits) // 2 :], cores=2)
    efficiency = scaling_efficiency([p for p in points if p.files >= limits[len(limits) // 2]], two)
    rec = recommend(
        points, files_per_hour=args.files_per_hour, file_kb=args.file_kb, sla_s=args.sla_s, efficiency=efficiency
    )
    print("files  MB      seconds  MB/s (one core)")
    for pt in points:
        print(f"{pt.files:5d}  {pt.mb:6.1f}  {pt.seconds:7.2f}  {pt.mb_per_s:6.2f}")
    print("files  MB      seconds  MB/s (two cores)")
    for pt in two:
        print(f"{pt.files:5d}  {pt.mb:6.1f}  {pt.seconds:7.2f}  {pt.mb_per_s:6.2f}")
    print(f"fit: {rec['batch_overhead_s']} s fixed per batch + {rec['per_core_mb_s']} MB/s per core")
    print(
        f"scaling from 1 to 2 cores: {rec['scaling_efficiency']:.2f} of linear (measured), applied to the "
        "cluster's executor cores"
    )
    print(f"volume: {args.files_per_hour} files/h x {args.file_kb} KB = {rec['volume_mb_s']} MB/s; SLA {args.sla_s} s")
    for o in rec["options"]:
        print(
            f"  {o['worker_type']:6} x {o['workers']:3d} workers, trigger {o['trigger_interval_s']} s, "
            f"maxFilesPerTrigger {o['max_files_per_trigger']}, batch ~{o['expected_batch_s']} s "
            f"(utilization {o['utilization']}), ${o['monthly_usd']}/month"
        )
    print(f"recommended: {rec['recommended']}")
    plot(points, args.out / "sizing.png")
    body = {"points": [asdict(x) for x in points], "two_core_points": [asdict(x) for x in two], **rec}
    (args.out / "sizing.json").write_text(json.dumps(body, indent=1))
    print(f"plot: {args.out / 'sizing.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
