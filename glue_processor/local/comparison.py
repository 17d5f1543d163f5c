"""What landed against what was loaded: the comparison, pure, and in bounded memory.

:func:`reconcile` indexes every load by its object version (about 400 bytes of Python objects a
load): at the seed's load (200,000 files an hour) a week of history is 33.6M loads, ~13 GB.
:func:`reconcile_bounded` holds the loads only up to ``limit``; past it, the loads and the landing
listing are both spilled to files split by a hash of the object version (a version's loads and its
landed object fall in the same part), and each part is reconciled alone, split again (another
hash) while it still holds more than ``limit`` loads. What is held at once: ``limit`` loads, and
the report (what is missing, failed or twice: what the command prints anyway).
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import IO, Any

Identity = tuple[str, str, str]
DONE = {"ingested", "empty"}
# left out on purpose: the routing file sends the key to no table (unmatched: ignore); a later version
# of the key was loaded (a table that mirrors its bucket: docs/mirror.md); its rows were replaced by a
# later version's or retracted with the key (they were loaded first: counted as ingested too)
ACCOUNTED = {"ignored", "superseded", "replaced", "retracted"}


@dataclass(frozen=True)
class LandedObject:
    bucket: str
    key: str
    etag: str
    size: int
    version_id: str | None = None


@dataclass(frozen=True)
class Load:
    """One object version's outcome in one batch: a row of the load history, or a commit record's
    source (``table``: None when the ledger does not say)."""

    bucket: str
    key: str
    etag: str
    status: str
    reason: str | None
    batch_id: int
    table: str | None = None


@dataclass
class Report:
    landed: int = 0
    ingested: int = 0
    tables: dict[str, int] = field(default_factory=dict)  # objects ingested per table (when known)
    ignored: int = 0  # left out on purpose: the routing ignores them
    superseded: int = 0  # left out on purpose: a later version of the key was loaded
    never_ingested: list[LandedObject] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # s3 uri -> "status: reason"
    ingested_twice: dict[str, list[int]] = field(default_factory=dict)  # s3 uri@etag -> batch ids
    requeued: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "landed": self.landed,
            "ingested": self.ingested,
            "tables": self.tables,
            "ignored": self.ignored,
            "superseded": self.superseded,
            "never_ingested": [f"s3://{o.bucket}/{o.key}" for o in self.never_ingested],
            "failed": self.failed,
            "ingested_twice": self.ingested_twice,
            "requeued": self.requeued,
        }


NOW_ROUTED = "ignored: by an earlier routing file; the current one routes it to a table"


def reconcile(
    landed: Iterable[LandedObject], loads: Iterable[Load], *, routed: Callable[[str], bool] | None = None
) -> Report:
    """Pure comparison of a landing listing with what was loaded. ``routed``: whether the routing
    the job runs with now sends a key to a table; an object an earlier routing ignored that it
    takes is never ingested, so a requeue loads it."""
    batches: dict[Identity, list[int]] = defaultdict(list)
    tables: dict[Identity, str] = {}
    problems: dict[Identity, str] = {}
    left_out: dict[Identity, str] = {}
    for load in loads:
        identity = (load.bucket, load.key, load.etag)
        if load.status in ACCOUNTED:
            if load.status in ("ignored", "superseded"):
                left_out.setdefault(identity, load.status)
        elif load.status in DONE:
            batches[identity].append(load.batch_id)
            if load.table:
                tables[identity] = load.table
        elif load.status != "duplicate":
            problems[identity] = f"{load.status}: {load.reason}"
    report = Report()
    for obj in landed:
        report.landed += 1
        identity = (obj.bucket, obj.key, obj.etag)
        if identity in batches:
            report.ingested += 1
            if identity in tables:
                report.tables[tables[identity]] = report.tables.get(tables[identity], 0) + 1
        elif left_out.get(identity) == "superseded":
            report.superseded += 1
        elif identity in left_out and (routed is None or not routed(obj.key)):
            report.ignored += 1
        elif identity in left_out:
            report.never_ingested.append(obj)
            report.failed[f"s3://{obj.bucket}/{obj.key}"] = NOW_ROUTED
        else:
            report.never_ingested.append(obj)
            if identity in problems:
                report.failed[f"s3://{obj.bucket}/{obj.key}"] = problems[identity]
    for (bucket, key, etag), ids in batches.items():
        if len(ids) > 1:
            report.ingested_twice[f"s3://{bucket}/{key}@{etag}"] = sorted(ids)
    return report


LIMIT = 1_000_000  # loads held at once (~400 MB)
PARTS = 64  # files a spill splits into (twice: loads and landed), each level
DEPTH = 4  # levels of splitting: 64**4 parts; past it, a part is reconciled whole (one version loaded that often)


def reconcile_bounded(
    landed: Iterable[LandedObject],
    loads: Iterable[Load],
    *,
    routed: Callable[[str], bool] | None = None,
    limit: int = LIMIT,
    parts: int = PARTS,
    spill_dir: Path | None = None,
) -> Report:
    """:func:`reconcile`'s report, holding at most ``limit`` loads: the same counts and entries, the
    never-ingested in the order they landed."""
    loads = iter(loads)
    head = list(islice(loads, limit + 1))
    if len(head) <= limit:
        return reconcile(landed, head, routed=routed)
    with tempfile.TemporaryDirectory(prefix="reconcile-", dir=spill_dir) as tmp:
        root = Path(tmp)
        load_rows = (_load_row(x) for src in (head, loads) for x in src)
        landed_rows = ([n, o.bucket, o.key, o.etag, o.size, o.version_id] for n, o in enumerate(landed))
        split = _split_both(load_rows, landed_rows, root / "loads", root / "landed", parts, level=0)
        del head
        report = _merged(split, routed, limit=limit, parts=parts, level=1)
    missing = report.never_ingested
    missing.sort(key=lambda o: o.seq if isinstance(o, _Listed) else 0)
    for i, o in enumerate(missing):
        missing[i] = LandedObject(o.bucket, o.key, o.etag, o.size, o.version_id)
    return report


@dataclass(frozen=True)
class _Listed(LandedObject):
    seq: int = 0  # its place in the landing listing: the report says the missing in that order


def _part(
    loads_path: Path,
    count: int,
    landed_path: Path,
    routed: Callable[[str], bool] | None,
    *,
    limit: int,
    parts: int,
    level: int,
) -> Report:
    if count > limit and level < DEPTH:  # one hash's part still too large: split it by another
        split = _split_both(
            _rows(loads_path),
            _rows(landed_path),
            loads_path.with_suffix(""),
            landed_path.with_suffix(""),
            parts,
            level=level,
        )
        loads_path.unlink()
        landed_path.unlink()
        return _merged(split, routed, limit=limit, parts=parts, level=level + 1)
    report = reconcile(_landed_of(landed_path), (Load(*r) for r in _rows(loads_path)), routed=routed)
    loads_path.unlink()
    landed_path.unlink()
    return report


def _split_both(
    load_rows: Iterable[list[Any]],
    landed_rows: Iterable[list[Any]],
    loads: Path,
    landed: Path,
    parts: int,
    *,
    level: int,
) -> list[tuple[Path, int, Path]]:
    """Loads and landed objects split alike: each part's (loads file, its loads, landed file)."""
    load_files = _split(load_rows, loads, parts, level=level)
    landed_files = _split(landed_rows, landed, parts, level=level, at=slice(1, 4))
    return [(lp, n, dp) for (lp, n), (dp, _) in zip(load_files, landed_files, strict=True)]


def _merged(
    split: list[tuple[Path, int, Path]],
    routed: Callable[[str], bool] | None,
    *,
    limit: int,
    parts: int,
    level: int,
) -> Report:
    report = Report()
    for loads_path, count, landed_path in split:
        _merge(report, _part(loads_path, count, landed_path, routed, limit=limit, parts=parts, level=level))
    return report


def _load_row(x: Load) -> list[Any]:
    return [x.bucket, x.key, x.etag, x.status, x.reason, x.batch_id, x.table]


def _landed_of(path: Path) -> Iterator[LandedObject]:
    for seq, bucket, key, etag, size, version_id in _rows(path):
        yield _Listed(bucket, key, etag, size, version_id, seq)


def _split(
    rows: Iterable[list[Any]], stem: Path, parts: int, *, level: int, at: slice = slice(0, 3)
) -> list[tuple[Path, int]]:
    """``rows`` written to ``parts`` JSON-lines files by a hash of their object version (the fields
    ``at``: bucket, key, eTag), salted by ``level`` so a part splits again over all the new parts."""
    stem.mkdir(parents=True, exist_ok=True)
    paths = [stem / f"{i}.jsonl" for i in range(parts)]
    counts = [0] * parts
    files: list[IO[str]] = [p.open("w", encoding="utf-8") for p in paths]
    try:
        for row in rows:
            i = hash((level, *row[at])) % parts
            files[i].write(json.dumps(row, ensure_ascii=False) + "\n")
            counts[i] += 1
    finally:
        for f in files:
            f.close()
    return list(zip(paths, counts, strict=True))


def _rows(path: Path) -> Iterator[list[Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _merge(into: Report, part: Report) -> None:
    into.landed += part.landed
    into.ingested += part.ingested
    into.ignored += part.ignored
    into.superseded += part.superseded
    into.requeued += part.requeued
    for table, n in part.tables.items():
        into.tables[table] = into.tables.get(table, 0) + n
    into.never_ingested += part.never_ingested
    into.failed.update(part.failed)
    into.ingested_twice.update(part.ingested_twice)
