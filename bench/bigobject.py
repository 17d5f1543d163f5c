"""One huge gzip object through one parse task: its peak memory, which must not grow with the object.

    python -m bench.bigobject [--gz-mb 1024]

Writes a gzip NDJSON object of small lines (about five bytes of text per gzip byte) without
holding it in memory, then runs the job's parse task (``glue_processor.read.task.run_task``) over it in
a subprocess and reports that process's peak RSS, the time and the text bytes read. Run it at two
sizes: with streamed reading the peak is the same.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

MB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]


def block(rng: random.Random, lines: int) -> bytes:
    kinds = ("view", "click", "buy", "signup")
    out = []
    for i in range(lines):
        rec = {"id": rng.getrandbits(40), "k": rng.choice(kinds), "u": f"u{rng.randint(1, 10**6)}", "v": i % 997}
        out.append(json.dumps(rec, separators=(",", ":")))
    return ("\n".join(out) + "\n").encode()


def generate(path: Path, gz_mb: int) -> int:
    """Write about ``gz_mb`` MiB of gzip; returns the text bytes written."""
    rng = random.Random(5)  # noqa: S311 - reproducible data
    blocks = [block(rng, 20_000) for _ in range(8)]
    text = 0
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as gz:
        n = 0
        while raw.tell() < gz_mb * MB:
            data = blocks[n % len(blocks)]
            # vary the digits so blocks do not repeat byte for byte
            shift = str(n % 10).encode()
            gz.write(data.replace(b'"v":1', b'"v":' + shift))
            text += len(data)
            n += 1
    return text


def run_one(path: Path) -> None:
    """In the measured subprocess: one parse task over the object, as the job runs it."""
    from glue_processor.read.task import run_task
    from glue_processor.shared.spec import FileTask, TaskSpec

    out = path.parent / "out"
    item = FileTask(path.as_uri(), path.as_uri(), "e", datetime.now(UTC), "file:///manifest.json")
    spec = TaskSpec(0, (item,), ("id", "k", "u", "v"), f"{out.as_uri()}/data", f"{out.as_uri()}/q", 1,
                    datetime.now(UTC), 128 * MB)  # fmt: skip
    t0 = time.monotonic()
    result = run_task(spec)
    (found,) = result.files
    print(json.dumps({"status": found.status, "rows": found.good, "text_bytes": found.text_bytes,
                      "seconds": round(time.monotonic() - t0, 1), "files": len(result.data)}))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bigobject")
    p.add_argument("--gz-mb", type=int, default=256, help="gzip size in MiB (the issue's case: 1024)")
    p.add_argument("--dir", type=Path, default=ROOT / ".bench" / "bigobject")
    p.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.run:
        run_one(args.run)
        return 0
    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / f"big-{args.gz_mb}.json.gz"
    if not path.exists():
        t0 = time.monotonic()
        text = generate(path, args.gz_mb)
        took = time.monotonic() - t0
        print(f"wrote {path.stat().st_size / MB:.0f} MiB gzip, {text / MB:.0f} MiB of text in {took:.0f} s")
    proc = subprocess.run([sys.executable, "-m", "bench.bigobject", "--run", str(path)], cwd=ROOT, capture_output=True,
                          text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{path.name}: {result} peak RSS of the task process {peak_mb:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
