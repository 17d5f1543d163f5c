"""The sizing arithmetic and the benchmark data set (no timing here: speed lives in make bench)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from bench.data import generate
from bench.sizing import Point, fit, recommend, scaling_efficiency


def test_fit_recovers_overhead_and_throughput() -> None:
    points = [Point(n, mb, 2.0 + mb / 10.0) for n, mb in [(1, 5.0), (2, 10.0), (4, 20.0), (8, 40.0)]]
    overhead, per_core = fit(points)
    assert round(overhead, 3) == 2.0 and round(per_core, 3) == 10.0


def test_recommendation_meets_volume_and_half_the_sla() -> None:
    points = [Point(n, mb, 2.0 + mb / 10.0) for n, mb in [(1, 5.0), (2, 10.0), (4, 20.0), (8, 40.0)]]
    rec = recommend(points, files_per_hour=200_000, file_kb=1024, sla_s=600, efficiency=0.7)
    best = rec["recommended"]
    assert rec["volume_mb_s"] == round(200_000 * 1024 / 1024 / 3600, 2)
    assert best["expected_batch_s"] <= 300 and best["utilization"] <= 1
    # capacity covers the volume with headroom: (workers - 1) x cores x per-core x efficiency
    cores = {"G.025X": 2, "G.1X": 4, "G.2X": 8}[best["worker_type"]]
    assert (best["workers"] - 1) * cores * 10.0 * 0.7 >= rec["volume_mb_s"] * 1.3
    assert best["monthly_usd"] == min(o["monthly_usd"] for o in rec["options"])


def test_scaling_efficiency_is_what_two_cores_show() -> None:
    one = [Point(n, mb, 1.0 + mb / 10.0) for n, mb in [(1, 5.0), (2, 10.0), (4, 20.0)]]
    # two cores at 1.8x the one-core rate: 90 % of linear
    two = [Point(n, mb, 1.0 + mb / 18.0) for n, mb in [(1, 5.0), (2, 10.0), (4, 20.0)]]
    assert round(scaling_efficiency(one, two), 3) == 0.9
    # and a recommendation made with a lower measured efficiency needs more workers
    points = [Point(n, mb, 2.0 + mb / 10.0) for n, mb in [(1, 5.0), (2, 10.0), (4, 20.0), (8, 40.0)]]
    low = recommend(points, files_per_hour=200_000, file_kb=1024, sla_s=600, efficiency=0.4)
    high = recommend(points, files_per_hour=200_000, file_kb=1024, sla_s=600, efficiency=0.9)
    assert low["recommended"]["monthly_usd"] > high["recommended"]["monthly_usd"]


def test_benchmark_data_is_reproducible(tmp_path: Path) -> None:
    a = generate(tmp_path / "a", total_mb=2, file_mb=1)
    b = generate(tmp_path / "b", total_mb=2, file_mb=1)
    digest = lambda ps: [hashlib.sha256(p.read_bytes()).hexdigest() for p in ps]  # noqa: E731
    assert len(a) == 2 and digest(a) == digest(b)
    assert all(p.stat().st_size >= 1024 * 1024 for p in a)
