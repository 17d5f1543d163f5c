"""The end of a local run, as a user reads it: what happened to their files first, then the tables.

Paths are the user's, relative to where they ran ``make``; what went wrong is named file by file
(a few, then how to list the rest); the metrics stay in ``metrics.jsonl`` (``make metrics``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.ledger import CommitRecord, SourceRecord
from glue_processor.read.names import column_names
from glue_processor.read.outcome import REASON_ALL_BAD

MB = 1e6
SHOWN = 8  # problem lines listed before "... and N more"
LANDING = "s3://local-landing/"
MORE_SQL = "SQL=\"SELECT key, status, reason FROM load_history WHERE status <> 'ingested' OR reason IS NOT NULL\""


@dataclass
class TableState:
    name: str  # database.table
    rows: int
    files: int
    bytes: int
    duplicates: int | None = None  # (source, line) pairs seen twice; None: not checked


@dataclass
class RunReport:
    """What one ``make run`` did: its commit records, what it fed, and the tables after it."""

    records: Sequence[CommitRecord]
    fed_files: int
    ignored: Sequence[str]  # keys of files the pipeline does not take (by name)
    tables: Sequence[TableState]
    quarantined: Sequence[dict[str, Any]] = ()  # this run's quarantine records (the first few)
    workdir: Path = Path(".work")
    data: Path = Path(".")
    seconds: float = 0.0
    known_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # table -> its keys after the run


def outcome(source: SourceRecord) -> str:
    """What happened to one object version, in the words of the summary."""
    if source.status in ("ingested", "empty") and source.reason and not source.reason.startswith(REASON_ALL_BAD):
        return "loaded in part"
    if source.status == "empty":
        return "every line quarantined" if source.bad_records else "empty"
    return {
        "ingested": "loaded",
        "missing": "missing",
        "unreadable": "unreadable",
        "rejected": "quarantined whole",
        "duplicate": "already loaded",
        "ignored": "ignored",
        "superseded": "superseded",
    }.get(source.status, source.status)


def render(report: RunReport, *, here: Path | None = None) -> str:
    here = here or Path.cwd()
    rel = _relative(here)
    sources = [s for r in report.records for s in r.sources]
    kinds = Counter(outcome(s) for s in sources)
    kinds["ignored"] += len(report.ignored)
    rows = sum(s.records for s in sources)
    bad = sum(s.bad_records for s in sources)
    out = [_headline(report, kinds, rows, bad)]
    problems = _problems(report, sources, rel)
    out += [f"  {what:<18} {where}{('  ' + why) if why else ''}" for what, where, why in problems[:SHOWN]]
    if len(problems) > SHOWN:
        out.append(f"  ... and {len(problems) - SHOWN} more: make query WORKDIR={rel(report.workdir)} {MORE_SQL}")
    for table in report.tables:
        dup = ""
        if table.duplicates is not None:
            once = ", each (source, line) once"
            dup = once if not table.duplicates else f", {table.duplicates} (source, line) pairs twice"
        out.append(
            f"table {table.name}: {table.rows:,} rows in {table.files:,} Parquet file{'s' * (table.files != 1)} "
            f"({table.bytes / MB:,.1f} MB){dup}"
        )
    workdir = rel(report.workdir)
    out.append(
        f"query: make query WORKDIR={workdir} [SQL=...]; quarantine records: {rel(report.workdir / 'quarantine')}; "
        f"metrics: make metrics WORKDIR={workdir}"
    )
    return "\n".join(out)


def _headline(report: RunReport, kinds: Counter[str], rows: int, bad: int) -> str:
    loaded = kinds["loaded"] + kinds["loaded in part"] + kinds["empty"]
    parts = [f"{loaded:,} loaded ({rows:,} row{'s' * (rows != 1)})"]
    order = ("loaded in part", "every line quarantined", "missing", "unreadable", "quarantined whole", "ignored")
    parts += [f"{kinds[k]:,} {k}" for k in order if kinds[k]]
    parts += [f"{kinds[k]:,} {k}" for k in ("already loaded", "superseded") if kinds[k]]
    if bad:
        parts.append(f"{bad:,} line{'s' * (bad != 1)} quarantined")
    batches = len(report.records)
    return (
        f"your files: {report.fed_files + len(report.ignored):,} new; "
        + ", ".join(parts)
        + f" ({batches} batch{'es' * (batches != 1)}, {report.seconds:.1f} s)"
    )


def _problems(
    report: RunReport, sources: Sequence[SourceRecord], rel: Callable[[Path], str]
) -> list[tuple[str, str, str]]:
    """(what, where, why) of each thing the user should know: lines and files quarantined, files
    loaded in part or not at all, files ignored, keys renamed."""

    def path_of(key: str) -> str:
        return rel(report.data / key)

    out: list[tuple[str, str, str]] = []
    for q in report.quarantined:
        uri = str(q.get("source_uri", ""))
        where = path_of(uri.removeprefix(LANDING)) if uri.startswith(LANDING) else uri
        if q.get("kind") == "line":
            out.append(("line quarantined", f"{where}:{q.get('line')}", str(q.get("reason", ""))))
    for s in sources:
        kind = outcome(s)
        if kind in ("loaded", "already loaded", "empty"):
            continue
        why = s.reason or ""
        if kind == "loaded in part":
            why = f"{s.records:,} rows loaded, then: {why}"
        out.append((kind, path_of(s.key), why))
    out += [("ignored", path_of(k), "not .json, .ndjson or .jsonl (optionally .gz)") for k in report.ignored]
    out += [(f"column {name}", f'key "{key}"', why) for key, name, why in renamed(report.known_keys)]
    return out


def renamed(known: dict[str, tuple[str, ...]]) -> list[tuple[str, str, str]]:
    """Keys whose column is not named as they are: (key, column, why). Athena and Glue resolve names
    without case, so of keys that differ only in case one keeps the name and the others get a suffix."""
    out = []
    for keys in known.values():
        by_lower: dict[str, list[str]] = {}
        for key in keys:
            by_lower.setdefault(key.lower(), []).append(key)
        for key, name in column_names(keys):
            if key and key != name:
                twins = [k for k in by_lower.get(key.lower(), []) if k != key]
                why = (
                    f'differs from "{twins[0]}" only in case (Athena and Glue cannot tell them apart): query {name}'
                    if twins
                    else f"a name of the job's own: query {name}"
                )
                out.append((key, name, why))
    return out


def _relative(here: Path) -> Callable[[Path], str]:
    return lambda path: shown(path, here)


def shown(path: Path, here: Path) -> str:
    """A path as the user would type it from ``here``: relative below it, else absolute."""
    path = Path(os.path.abspath(path))
    return os.path.relpath(path, here) if path.is_relative_to(here) else str(path)


def quarantine_records(records: Iterable[CommitRecord], *, limit: int = SHOWN * 4) -> list[dict[str, Any]]:
    """The first ``limit`` quarantine records this run's batches wrote (local files)."""
    out: list[dict[str, Any]] = []
    for record in records:
        for f in record.quarantine_files:
            path = Path(f.final.removeprefix("file://"))
            if not path.exists():
                continue
            with path.open(encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        out.append(json.loads(line))
                    if len(out) >= limit:
                        return out
    return out
