"""A realistic, reproducible sample of NDJSON files for ``make run`` and the tests."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

_NAMES = ["ana", "bo", "chen", "dara", "eli", "fatou", "gus", "hana", "ivo", "jürgen", "kofi", "lena"]
_EVENTS = ["click", "view", "purchase", "signup", "logout"]
# File names as producers really write them: spaces, unicode, '+', '%', nested prefixes.
_NAME_PATTERNS = [
    "events/{day}/part-{i:04d}.json",
    "events/{day}/batch {i:04d}.ndjson",
    "events/{day}/größe+{i:04d}.jsonl",
    "events/{day}/100% done {i:04d}.json",
    "events/{day}/compressed-{i:04d}.json.gz",
]


def record(rng: random.Random, seq: int) -> dict[str, Any]:
    """One event: nested objects, arrays, optional fields, and a field whose type drifts."""
    rec: dict[str, Any] = {
        "event_id": f"evt-{seq:09d}",
        "event_type": rng.choice(_EVENTS),
        "ts": f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
        "user": {"id": rng.randint(1, 10_000), "name": rng.choice(_NAMES), "tags": rng.sample(_EVENTS, 2)},
        "amount": round(rng.uniform(1, 500), 2),
        "items": [{"sku": f"sku-{rng.randint(1, 999)}", "qty": rng.randint(1, 5)} for _ in range(rng.randint(0, 3))],
        "payload": "x" * rng.randint(100, 900),
    }
    if rng.random() < 0.3:
        rec["coupon"] = f"C{rng.randint(100, 999)}"
    if rng.random() < 0.2:
        rec["amount"] = str(rec["amount"])  # type drift: sometimes a string
    if rng.random() < 0.1:
        rec["flag"] = rng.random() < 0.5
    if rng.random() < 0.05:
        rec["note"] = None
    return rec


def generate(root: Path, *, files: int = 48, records_per_file: int = 400, seed: int = 7) -> list[Path]:
    """Write ``files`` NDJSON files under ``root``; returns their paths."""
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not cryptography
    written = []
    seq = 0
    for i in range(files):
        rel = _NAME_PATTERNS[i % len(_NAME_PATTERNS)].format(day=f"2026-11-{1 + i % 3:02d}", i=i)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for _ in range(records_per_file):
            lines.append(json.dumps(record(rng, seq), ensure_ascii=False))
            seq += 1
        body = ("\n".join(lines) + "\n").encode("utf-8")
        path.write_bytes(gzip.compress(body, mtime=0) if path.name.endswith(".gz") else body)
        written.append(path)
    return written
