"""A readable table of the datums a local run wrote to ``<WORKDIR>/metrics.jsonl``."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from contracts.exceptions import ConfigError
from contracts.metrics import BY_NAME, TABLE_DIMENSION
from glue_processor.local import runs
from glue_processor.local.errors import Parser, cli, user_path
from glue_processor.local.layout import LocalLayout
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


def _tables_hidden(datums: list[dict[str, Any]]) -> bool:
    """Whether the per-table datums are left out: with one table, its series repeats the job's."""
    return len({d["dimensions"][TABLE_DIMENSION] for d in datums if TABLE_DIMENSION in d["dimensions"]}) < 2


def repeated(datums: list[dict[str, Any]]) -> int:
    """The per-table datums :func:`render_metrics` leaves out (the job's own series again)."""
    return sum(1 for d in datums if TABLE_DIMENSION in d["dimensions"]) if _tables_hidden(datums) else 0


def render_metrics(datums: list[dict[str, Any]]) -> str:
    """One row per metric (and per metric and table, when a run wrote several tables)."""
    hidden = _tables_hidden(datums)
    by_name: dict[tuple[str, str], list[float]] = defaultdict(list)
    units: dict[str, str] = {}
    for d in datums:
        table = d["dimensions"].get(TABLE_DIMENSION, "")
        if table and hidden:
            continue
        by_name[d["name"], table].append(float(d["value"]))
        units[d["name"]] = d["unit"]
    rows = [("metric", "source", "unit", "n", "sum", "min", "max", "last")]
    order = [m.name for m in BY_NAME.values()]
    for name, table in sorted(by_name, key=lambda n: (order.index(n[0]) if n[0] in order else len(order), n[1])):
        values = by_name[name, table]
        source = BY_NAME[name].source.value if name in BY_NAME else "?"
        rows.append(
            (
                f"{name} [{table}]" if table else name,
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


@cli
def main(argv: list[str] | None = None) -> int:
    """``make metrics``: the datums of the last run (``--all``: of every run) of a WORKDIR."""
    p = Parser(prog="metrics", description=main.__doc__)
    p.add_argument("--workdir", type=user_path, default=Path(".work"))
    p.add_argument("--all", action="store_true", help="every run's datums, not only the last run's")
    args = p.parse_args(argv)
    layout = LocalLayout(args.workdir.resolve())
    if not layout.metrics.exists():
        raise ConfigError(f"WORKDIR={args.workdir}: no metrics.jsonl here; run make run WORKDIR={args.workdir} first")
    last = runs.read(layout)
    started = last.get("began_at") or last.get("started_at")  # the feed's (manifest builder's) datums too
    since = None if args.all or not started else datetime.fromisoformat(started)
    datums = read_datums(layout.metrics, since=since)
    hidden = repeated(datums)
    again = f" ({hidden:,} of them per table, the job's own again with one table: not shown)" if hidden else ""
    print(
        f"{len(datums):,} datums {'of every run' if since is None else 'of the last run'} in {layout.metrics}{again}, "
        "a row per metric (n: its datums; sum, min, max and last of their values):"
    )
    print(render_metrics(datums))
    return 0


if __name__ == "__main__":
    sys.exit(main())
