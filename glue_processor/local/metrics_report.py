"""A readable table of the datums a local run wrote to ``<WORKDIR>/metrics.jsonl``."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from contracts.metrics import BY_NAME
from glue_processor.local.text import aligned


def read_datums(path: Path, *, since: datetime | None = None) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        if since is None or datetime.fromisoformat(item["timestamp"]) >= since:
            out.append(item)
    return out


def render_metrics(datums: list[dict[str, Any]]) -> str:
    by_name: dict[str, list[float]] = defaultdict(list)
    units: dict[str, str] = {}
    for d in datums:
        by_name[d["name"]].append(float(d["value"]))
        units[d["name"]] = d["unit"]
    rows = [("metric", "source", "unit", "n", "sum", "min", "max", "last")]
    order = [m.name for m in BY_NAME.values()]
    for name in sorted(by_name, key=lambda n: order.index(n) if n in order else len(order)):
        values = by_name[name]
        source = BY_NAME[name].source.value if name in BY_NAME else "?"
        rows.append(
            (
                name,
                source,
                units[name],
                str(len(values)),
                _fmt(sum(values)),
                _fmt(min(values)),
                _fmt(max(values)),
                _fmt(values[-1]),
            )
        )
    return aligned(rows[0], rows[1:], left=3)


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:.3f}"
