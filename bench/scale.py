"""``make bench-scale``: does a batch use every core, and how far could it?

A warm ~200 MB batch of one shape goes through the real query (``bench.stream``'s run: two
manifests, the second batch warm, a fresh process pinned to its CPUs) on one core and on two, the
rounds alternated so a slow spell of this shared machine hits both. Per run: the whole
``BatchDuration``, its parse (the Spark tasks that read, parse and write parts), its write stage and
the rest. Then the speed-up, and what Amdahl's law allows it from the one-core batch:

- ``parse halved``: the parse tasks take half as long on two cores and nothing else changes;
- ``all but Spark halved``: every second of the job's own halves too (the write stage, the commits,
  the metrics), and only Spark's own steps of the trigger (offsets, planning, WAL: its
  ``triggerExecution`` less ``addBatch``) stay. No change to the job can pass this one.

``python -m bench.scale [--shape compact] [--mb 200] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.stream import ROOT, measure
from glue_processor.local.text import aligned

TARGET = 1.8  # issue 45: a warm ~200 MB batch on two cores at least 1.8x one core


# the job's driver steps of a batch (ManifestBatchJob.steps), in the order it takes them
DRIVER_STEPS = ("collect", "prepare", "plan", "commit_record", "publish", "report")


def parts(warm: dict[str, Any]) -> dict[str, float]:
    """A warm batch's seconds: whole, parse tasks, write stage, Spark's own steps, and the rest; the
    rest itemised by the job's driver steps where it timed them (``other``: what none of them holds,
    such as the Spark jobs' own start and the Python callback's entry)."""
    stages, steps = warm["stages"], warm.get("steps", {})
    parse, write = stages.get("read_parse_write", 0.0), stages.get("write", 0.0)
    batch, spark = warm["batch_s"], warm["spark_s"]
    rest = batch - parse - write - spark
    itemised = {name: float(steps.get(name, 0.0)) for name in DRIVER_STEPS}
    return {
        "batch": batch,
        "parse": parse,
        "write": write,
        "spark": spark,
        "rest": rest,
        **itemised,
        "other": rest - sum(itemised.values()),
    }


def ceilings(one: dict[str, float], cores: int = 2) -> dict[str, float]:
    """The most ``cores`` cores can make of the one-core batch ``one`` (:func:`parts`): with its parse
    spread over them, and with all of it spread but Spark's own steps."""
    batch = one["batch"]
    return {
        "parse halved": batch / (batch - one["parse"] + one["parse"] / cores),
        "all but Spark halved": batch / (one["spark"] + (batch - one["spark"]) / cores),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.scale", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", default="compact")
    p.add_argument("--mb", type=int, default=200, help="MB per batch (two batches per run)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path, default=ROOT / ".bench" / "scale.json")
    args = p.parse_args(argv)
    runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    rows = []
    for n in range(args.rounds):
        for cores in (1, 2) if n % 2 == 0 else (2, 1):
            got = parts(measure(args.shape, mb=args.mb, cores=str(cores))["batches"][-1])
            runs[cores].append(got)
            rows.append(
                [
                    str(n + 1),
                    str(cores),
                    *(f"{got[k]:.2f}" for k in ("batch", "parse", "write", "spark", "rest", *DRIVER_STEPS, "other")),
                ]
            )
    print(f"a warm ~{args.mb} MB batch of {args.shape} on one core and on two, rounds alternated (s)")
    print(
        aligned(
            ["round", "cores", "BatchDuration", "parse", "write", "Spark", "rest", *DRIVER_STEPS, "other"], rows, left=0
        )
    )
    one = min(runs[1], key=lambda r: r["batch"])
    two = min(runs[2], key=lambda r: r["batch"])
    speedup = one["batch"] / two["batch"]
    rounds = ", ".join(f"{a['batch'] / b['batch']:.2f}x" for a, b in zip(runs[1], runs[2], strict=True))
    print(f"speed-up, best against best: {speedup:.2f}x (each round: {rounds}); target {TARGET}x")
    limits = ceilings(one)
    print(
        "Amdahl's ceiling from the best one-core batch: "
        + "; ".join(f"{name} {value:.2f}x" for name, value in limits.items())
    )
    verdict = "PASS" if speedup >= TARGET else "FAIL"
    if speedup < TARGET <= limits["all but Spark halved"]:
        verdict += ": the job's own serial part holds it back"
    elif speedup < TARGET:
        verdict += f": {TARGET}x is past the ceiling Spark's own steps set at this batch size"
    print(f"two cores >= {TARGET}x: {verdict}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"runs": runs, "speedup": speedup, "ceilings": limits}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
