"""The parser alone, per data shape, on one core: MB/s with no key known (a task's first chunk)
and with every key known (the steady state).

    python -m bench.parse [--mb 8] [--out .bench/parse]

Run it pinned to one CPU (``taskset -c 1``) for per-core figures.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.shapes import SHAPES, generate
from glue_processor.read.ndjson import parse_ndjson

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


def best_of(runs: int, fn: object) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.parse")
    p.add_argument("--mb", type=int, default=8, help="MB of each shape (one file, default 8)")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "parse")
    args = p.parse_args(argv)
    print(f"{'shape':22} {'MB':>5} {'keys':>5} {'fresh MB/s':>11} {'known MB/s':>11}")
    for shape in SHAPES:
        (path,) = generate(args.out / shape, shape, total_mb=args.mb, file_mb=args.mb)
        data = path.read_bytes()
        keys = parse_ndjson(data).keys
        fresh = best_of(3, lambda d=data: parse_ndjson(d))
        known = best_of(3, lambda d=data, k=keys: parse_ndjson(d, k))
        mb = len(data) / MB
        print(f"{shape:22} {mb:5.1f} {len(keys):5d} {mb / fresh:11.1f} {mb / known:11.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
