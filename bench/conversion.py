"""What declared types cost: parse only (all strings) vs parse + conversion, one core, same data.

Records with 12 fields, 6 of them declared (bigint, double, decimal(12,2), boolean, ISO timestamp,
epoch-ms timestamp), 2 % of the declared values unconvertible (rescued). The conversion runs on the
parsed columns exactly as the parse task runs it (:func:`glue_processor.shared.declared.conform`).
"""

from __future__ import annotations

import argparse
import json
import random
import time

from glue_processor.read.ndjson import parse_ndjson
from glue_processor.shared.declared import conform, parse_schema

SCHEMA = {
    "columns": {
        "id": "bigint",
        "price": "double",
        "amount": "decimal(12,2)",
        "paid": "boolean",
        "ts": {"type": "timestamp", "format": "iso8601"},
        "sent": {"type": "timestamp", "format": "epoch_ms"},
    }
}


def records(n: int, seed: int = 3) -> bytes:
    rng = random.Random(seed)  # noqa: S311 - bench data
    lines = []
    for i in range(n):
        bad = rng.random() < 0.02
        lines.append(
            json.dumps(
                {
                    "id": "n/a" if bad else i,
                    "price": round(rng.uniform(0, 1000), 3),
                    "amount": f"{rng.uniform(0, 10000):.2f}",
                    "paid": rng.random() < 0.5,
                    "ts": "yesterday" if bad else f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z",
                    "sent": 1_700_000_000_000 + i,
                    "name": f"user-{rng.randrange(10**6)}",
                    "city": rng.choice(["Lisbon", "Oslo", "Quito", "Accra"]),
                    "note": "x" * rng.randrange(10, 60),
                    "tags": ["a", "b"][: rng.randrange(3)],
                    "level": rng.randrange(10),
                    "meta": {"k": rng.randrange(100), "v": "y"},
                },
                separators=(",", ":"),
            )
        )
    return ("\n".join(lines) + "\n").encode()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="conversion", description=__doc__)
    p.add_argument("--records", type=int, default=400_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    data = records(args.records)
    declared = parse_schema(json.dumps(SCHEMA))
    parse_times, convert_times = [], []
    rescued = 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        parsed = parse_ndjson(data)
        t1 = time.perf_counter()
        _, _, rescued = conform(dict(zip(parsed.keys, parsed.columns, strict=True)), declared)
        t2 = time.perf_counter()
        parse_times.append(t1 - t0)
        convert_times.append(t2 - t1)
    parse_s, convert_s = min(parse_times), min(convert_times)
    mb = len(data) / 1e6
    print(
        f"{args.records:,} records, {mb:.0f} MB, 6 of 12 fields declared, {rescued:,} values rescued\n"
        f"parse (all strings):   {parse_s:6.2f} s  {mb / parse_s:6.1f} MB/s\n"
        f"conversion:            {convert_s:6.2f} s  (+{100 * convert_s / parse_s:.1f} % of the parse; "
        f"parse + conversion {mb / (parse_s + convert_s):.1f} MB/s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
