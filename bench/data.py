"""A reproducible synthetic NDJSON data set for benchmarks.

Records are ~1 KB with nested objects, arrays, optional fields and a field whose type varies;
files are ~10 MB. The same seed and size always give the same bytes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

MB = 1024 * 1024
# Every top-level key the generator can emit (DuckDB needs them declared).
COLUMNS = ("id", "ts", "kind", "user", "device", "items", "amount", "tags", "note", "session", "payload", "flag")


def record(rng: random.Random, seq: int) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": f"{seq:012d}",
        "ts": f"2026-11-{1 + seq % 28:02d}T{seq % 24:02d}:{seq % 60:02d}:{(seq * 7) % 60:02d}Z",
        "kind": rng.choice(("view", "click", "purchase", "signup")),
        "user": {
            "id": rng.randint(1, 10**6),
            "country": rng.choice(("DE", "FR", "US", "JP", "BR")),
            "segments": [rng.randint(1, 50) for _ in range(rng.randint(0, 4))],
        },
        "device": {"os": rng.choice(("ios", "android", "web")), "version": f"{rng.randint(1, 20)}.{rng.randint(0, 9)}"},
        "items": [
            {"sku": f"SKU{rng.randint(1, 99999):05d}", "qty": rng.randint(1, 5), "price": rng.randint(100, 99999)}
            for _ in range(rng.randint(0, 4))
        ],
        # the field whose type varies: a number, a string, or an object
        "amount": rng.choice((rng.randint(1, 10**6), str(rng.randint(1, 10**6)), {"value": rng.randint(1, 999)})),
        "tags": [rng.choice(("a", "b", "c", "d", "e")) for _ in range(rng.randint(0, 5))],
        "session": rng.randbytes(8).hex(),
        "payload": rng.randbytes(rng.randint(150, 350)).hex(),
    }
    if rng.random() < 0.3:
        rec["note"] = "".join(rng.choice("abcdefghij klmnop") for _ in range(rng.randint(10, 80)))
    if rng.random() < 0.2:
        rec["flag"] = rng.random() < 0.5
    return rec


def generate(root: Path, *, total_mb: int, file_mb: int = 10, seed: int = 42) -> list[Path]:
    """Write about ``total_mb`` MB of NDJSON in files of about ``file_mb`` MB (cached by a stamp)."""
    stamp = root / f".done-{total_mb}-{file_mb}-{seed}"
    if stamp.exists():
        return sorted(root.glob("*.json"))
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("*.json"):
        old.unlink()
    rng = random.Random(seed)  # noqa: S311 - reproducible data
    paths = []
    seq = 0
    for f in range(max(1, total_mb // file_mb)):
        path = root / f"part-{f:05d}.json"
        size = 0
        with path.open("w", encoding="utf-8") as out:
            while size < file_mb * MB:
                line = json.dumps(record(rng, seq), separators=(",", ":")) + "\n"
                out.write(line)
                size += len(line)
                seq += 1
        paths.append(path)
    for old in root.glob(".done-*"):
        old.unlink()
    stamp.touch()
    return paths
