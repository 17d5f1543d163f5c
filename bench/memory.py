"""A parse task's peak memory on the worst shapes: each shape run by one task in a fresh process.

``python -m bench.memory [--mb 8]`` prints, per shape, the rows loaded and the process's peak RSS
above its start (modules imported), against the bound :func:`glue_processor.read.task.memory_bound`
states. ``tests/glue_processor/test_memory.py`` runs the same shapes, smaller.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

MIB = 1024 * 1024


def _known_empty(path: Path, mb: int) -> tuple[int, ...]:
    path.write_bytes(b"{}\n" * (mb * MIB // 3))
    return (1000,)


def _keys_then_empty(path: Path, mb: int) -> tuple[int, ...]:
    head = json.dumps({f"key_{i:04d}": i for i in range(1000)}).encode() + b"\n"
    path.write_bytes(head + b"{}\n" * (mb * MIB // 3))
    return (0,)


def _huge_line(path: Path, mb: int) -> tuple[int, ...]:
    path.write_bytes(b'{"a":"' + b"x" * (8 * mb * MIB) + b'"}\n{"a":"y"}\n')
    return (0,)


def _malformed_huge_line(path: Path, mb: int) -> tuple[int, ...]:
    """A line of control characters (malformed JSON): quarantined, its record six times its bytes were
    it kept whole (each one written as \\u0001)."""
    path.write_bytes(b'{"a":"' + b"\x01" * (8 * mb * MIB) + b'"}\n{"a":"y"}\n')
    return (0,)


def _tiny_lines(path: Path, mb: int) -> tuple[int, ...]:
    path.write_bytes(b'{"a":1}\n' * (mb * MIB // 8))
    return (0,)


def _distinct_keys(path: Path, mb: int) -> tuple[int, ...]:
    line = 0
    with path.open("wb") as out:
        while out.tell() < mb * MIB:
            out.write(b"".join(b'{"id_%d":1}\n' % (line + i) for i in range(10_000)))
            line += 10_000
    return (0,)


def _many_partitions(path: Path, mb: int) -> tuple[int, ...]:
    """Tiny rows over 10,000 partitions (``identity(p)``): every spill sorts and shares them all."""
    line = 0
    with path.open("wb") as out:
        while out.tell() < mb * MIB:
            out.write(b"".join(b'{"p":"v%05d","a":%d}\n' % ((line + i) % 10_000, i) for i in range(10_000)))
            line += 10_000
    return (0, 1)


SHAPES: dict[str, Callable[[Path, int], tuple[int, ...]]] = {
    "1000 known columns x empty rows": _known_empty,
    "1000 keys on line 1, then empty rows": _keys_then_empty,
    "one huge line (8x the size)": _huge_line,
    "one malformed huge line (8x the size)": _malformed_huge_line,
    "many tiny lines": _tiny_lines,
    "a new key per line": _distinct_keys,
    "tiny rows over 10,000 partitions": _many_partitions,
}


def measure(shape: str, mb: int, workdir: Path) -> dict[str, float]:
    """Run one task over the shape in a fresh interpreter; its rows and peak RSS (MiB)."""
    data = workdir / "data.json"
    known, *partitioned = SHAPES[shape](data, mb)
    declared = 'parse_schema(\'{"columns": {"p": "string"}}\')'
    partitions = f"parse_partition_by('p', {declared})" if partitioned else "None"
    code = f"""
import json, resource
from datetime import UTC, datetime
from glue_processor.shared.spec import FileTask, TaskSpec
from glue_processor.read.task import run_task
from glue_processor.shared.declared import parse_schema
from glue_processor.shared.partitioning import parse_partition_by
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
spec = TaskSpec(index=0, files=(FileTask({data.as_uri()!r}, "s3://b/k", "e", datetime.now(UTC), "s3://m/x"),),
    known=tuple(f"key_{{i:04d}}" for i in range({known})), data_dir={(workdir / "out").as_uri()!r},
    quarantine_dir={(workdir / "q").as_uri()!r}, batch_id=0, ingest_time=datetime.now(UTC),
    target_bytes=128 * 1024 * 1024, row_group_bytes=16 * 1024 * 1024, row_groups_per_file=1,
    partitions={partitions})
result = run_task(spec)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"rows": sum(f.good for f in result.files), "bad": sum(f.bad for f in result.files),
    "start_mib": start / 1024, "peak_mib": peak / 1024}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=8, help="MiB of text per shape (the huge line: 8x)")
    parser.add_argument("--only", action="append", default=[], help="a shape to run (repeatable; default all)")
    args = parser.parse_args(argv)
    from glue_processor.read.task import memory_bound

    print(f"{'shape':40} {'rows':>10} {'peak MiB':>9} {'above start':>12} {'bound':>7}")
    for shape in args.only or SHAPES:
        with tempfile.TemporaryDirectory() as tmp:
            got = measure(shape, args.mb, Path(tmp))
        line = 8 * args.mb * MIB if "huge" in shape else 0
        bound = memory_bound(longest_line=line) / MIB
        above = got["peak_mib"] - got["start_mib"]
        print(f"{shape:40} {int(got['rows']):>10} {got['peak_mib']:>9.0f} {above:>12.0f} {bound:>7.0f}")
    print(f"(children's peak RSS: {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
