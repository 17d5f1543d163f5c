"""``make bench-scale``: does a batch use every core, and which part of it does not?

A warm ~200 MB batch of one shape goes through the real query (``bench.stream``'s run: two
manifests, the second batch warm, a fresh process pinned to its CPUs) on one core and on two, the
rounds alternated so a slow spell of this shared machine hits both. Per run: the whole
``BatchDuration``, its parse (the Spark tasks that read, parse and write parts), its write stage,
Spark's own steps of the trigger (its ``triggerExecution`` less ``addBatch``) and the rest, itemised
by the job's driver steps.

Then the speed-up of the best two-core run over the best one-core run, and, from that pair, each
part's seconds past a perfect split: what it took on two cores less half of what it took on one. They
add up to the whole batch's, and the largest names the part that holds the speed-up back. (No part is
fixed on one core either: pinned to one CPU, the JVM's and the Python workers' own threads share it
with the driver's steps, so those shrink on two as well.)

Last, the machine (:func:`bench.machine.probe`) and what the local write stage's copy into a new file
costs at its rate, with the speed-up of the batch less that stage: this VM backs a page at its first
touch, so that copy takes the same time on any number of cores, where on Glue it is S3's own copy.

``python -m bench.scale [--shape compact] [--mb 200] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from bench.machine import Machine, probe
from bench.stream import DATA, ROOT, measure
from contracts.ledger import Stage
from glue_processor.local.text import aligned
from glue_processor.metrics.timing import Step

TARGET = 1.8  # issue 45: a warm ~200 MB batch on two cores at least 1.8x one core
DRIVER_STEPS = Step.IN_ORDER  # the job's driver steps of a batch (ManifestBatchJob.steps)
PARTS = ("parse", "write", "spark", *DRIVER_STEPS, "other")
SCALE_DATA = DATA.parent / "scale"  # its own: the stream bench's data of the same shape is of another size


def parts(warm: dict[str, Any]) -> dict[str, float]:
    """A warm batch's seconds: whole, parse tasks, write stage, Spark's own steps, and the rest; the
    rest itemised by the job's driver steps where it timed them (``other``: what none of them holds,
    such as the Spark jobs' own start and the Python callback's entry); and, not a time, ``out_mb``:
    the Parquet it wrote, which :func:`new_pages` prices."""
    stages, steps = warm["stages"], warm.get("steps", {})
    parse, write = stages.get(Stage.READ_PARSE_WRITE, 0.0), stages.get(Stage.WRITE, 0.0)
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
        "out_mb": float(warm.get("out_mb", 0.0)),
    }


def past_split(one: dict[str, float], many: dict[str, float], cores: int) -> dict[str, float]:
    """Each part's seconds on ``cores`` cores past a perfect split of its one-core seconds, and the
    whole batch's (the parts' sum): 0 where a part divided by the cores exactly."""
    return {k: many[k] - one[k] / cores for k in ("batch", "rest", *PARTS)}


def verdict(speedup: float, past: dict[str, float], target: float = TARGET) -> str:
    """PASS or FAIL against ``target``, and the part with the most seconds past its split."""
    worst = max(PARTS, key=lambda k: past[k])
    line = f"two cores >= {target}x: {'PASS' if speedup >= target else 'FAIL'}"
    return line + f"; the most past a perfect split: {worst} ({past[worst]:+.2f} s of {past['batch']:+.2f} s)"


def new_pages(one: dict[str, float], many: dict[str, float], machine: Machine) -> str:
    """What the local write stage's copy costs on this machine, and the speed-up without that stage.

    The stage copies the batch's parts into one new file (``write/concat.py``). This VM backs a page
    only when the guest first touches it, and takes back a freed one within seconds, so a new file's
    page cache costs what :func:`bench.machine.probe` measures, on one core or on two. On Glue the stage
    is S3's own copy (``UploadPartCopy``): no byte through the driver."""
    mb = max(one["out_mb"], many["out_mb"])
    copy = mb / 1024 * machine.fresh_s_per_gb
    less_write = (one["batch"] - one["write"]) / max(1e-9, many["batch"] - many["write"])
    return (
        f"the write stage copies {mb:.0f} MB of Parquet into a new file: at this machine's "
        f"{machine.fresh_s_per_gb:.2f} s/GB for a new file that is ~{copy:.2f} s on any number of cores "
        f"(it took {one['write']:.2f} s on one, {many['write']:.2f} s on two)\n"
        f"the batch less its write stage (on Glue, S3's own copy): {less_write:.2f}x"
    )


def run(shape: str, mb: int, rounds: int) -> dict[int, list[dict[str, float]]]:
    """``rounds`` rounds of a one-core and a two-core run, the order alternated round by round."""
    runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for n in range(rounds):
        for cores in (1, 2) if n % 2 == 0 else (2, 1):
            runs[cores].append(parts(measure(shape, mb=mb, cores=str(cores), root=SCALE_DATA)["batches"][-1]))
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.scale", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", default="compact")
    p.add_argument("--mb", type=int, default=200, help="MB per batch (two batches per run)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path, default=ROOT / ".bench" / "scale.json")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be 1 or more")
    runs = run(args.shape, args.mb, args.rounds)
    columns = ("batch", "rest", *PARTS)
    rows = [
        [str(n + 1), str(cores), *(f"{r[k]:.2f}" for k in columns)]
        for n in range(args.rounds)
        for cores in (1, 2)
        for r in [runs[cores][n]]
    ]
    one = min(runs[1], key=lambda r: r["batch"])
    two = min(runs[2], key=lambda r: r["batch"])
    speedup = one["batch"] / two["batch"]
    past = past_split(one, two, 2)
    rows.append(["best", "2 - 1/2", *(f"{past[k]:+.2f}" if k in past else "" for k in columns)])
    print(f"a warm ~{args.mb} MB batch of {args.shape} on one core and on two, rounds alternated (s)")
    print(aligned(["round", "cores", "BatchDuration", "rest", *PARTS], rows, left=2))
    rounds = ", ".join(f"{a['batch'] / b['batch']:.2f}x" for a, b in zip(runs[1], runs[2], strict=True))
    print(f"speed-up, best against best: {speedup:.2f}x (each round: {rounds}); target {TARGET}x")
    print("(the last row: the best two-core run's seconds less half the best one-core run's, by part)")
    print(verdict(speedup, past))
    machine = probe(SCALE_DATA, cpus="0")  # after the runs: its own file would warm the pages they take
    print(machine.line())
    print(new_pages(one, two, machine))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"runs": runs, "speedup": speedup, "past_split": past, "machine": dataclasses.asdict(machine)}, indent=1
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
