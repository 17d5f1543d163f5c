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
from glue_processor.plan.mirror import RETRACTS
from glue_processor.read.outcome import REASON_ALL_BAD, REASON_UNROUTED
from glue_processor.shared.names import column_names

MB = 1e6
SHOWN = 8  # problem lines listed before "... and N more"
LANDING = "s3://local-landing/"
RESCUED_SQL = 'SQL="SELECT _source_uri, _line, _rescued FROM TABLE WHERE _rescued IS NOT NULL"'
MORE_SQL = "SQL=\"SELECT key, status, reason FROM load_history WHERE status <> 'ingested' OR reason IS NOT NULL\""


@dataclass
class TableState:
    name: str  # database.table
    rows: int
    files: int
    bytes: int
    duplicates: int | None = None  # (source version, line) pairs seen twice; None: not checked
    earlier_rows: int = 0  # rows of earlier versions of changed sources, kept beside the latest's


@dataclass
class RunReport:
    """What one ``make run`` did: its commit records, what it fed, and the tables after it."""

    records: Sequence[CommitRecord]
    fed_files: int
    ignored: Sequence[str]  # keys of files the pipeline does not take (by name)
    tables: Sequence[TableState]
    changed_files: int = 0  # of fed_files: new versions of files fed before
    removed_files: int = 0  # of fed_files: deletions of files fed before
    quarantined: Sequence[dict[str, Any]] = ()  # this run's quarantine records (the first few)
    workdir: Path = Path(".work")
    data: Path = Path(".")
    seconds: float = 0.0
    known_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # table -> its keys after the run
    shown_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # table -> keys an earlier summary saw
    # (batch id, table) -> (how its share settled, why) for each share not published: "abandoned"
    # (the table refused it; its files are not in the table) or "deferred" (set aside, published later)
    unpublished: dict[tuple[int, str], tuple[str, str]] = field(default_factory=dict)
    rule_modes: dict[tuple[str, str], str] = field(default_factory=dict)  # (table, rule) -> its on_fail
    # table -> (a column its rules read, the key of another case the records have)
    misnamed: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def outcome(self, record: CommitRecord, source: SourceRecord) -> str:
        """What happened to one object version of this run: :func:`outcome`, unless its table's
        share was not published."""
        held = self.unpublished.get((record.batch_id, source.table or ""))
        if held is not None and source.status in ("ingested", "empty"):
            return "not published" if held[0] == "abandoned" else "waiting to publish"
        return outcome(source)

    def not_published(self) -> int:
        """Files of this run whose rows the table refused (their share abandoned)."""
        return sum(1 for r in self.records for s in r.sources if self.outcome(r, s) == "not published")


def outcome(source: SourceRecord) -> str:
    """What happened to one object version, in the words of the summary."""
    if source.status in ("ingested", "empty") and source.reason and not source.reason.startswith(REASON_ALL_BAD):
        return "loaded in part"
    if source.status == "empty":
        return "every line quarantined" if source.bad_records else "empty"
    if source.status == "deleted":
        return "retracted" if source.reason == RETRACTS else "deleted"
    if source.status == "carried":
        return "carried over"
    if source.status == "ingested" and source.from_line > 1 and not source.reason:
        return "extended"
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
    sources = [(s, report.outcome(r, s)) for r in report.records for s in r.sources]
    kinds = Counter(kind for _, kind in sources)
    kinds["ignored"] += len(report.ignored)
    rows = Counter[str]()
    for s, kind in sources:
        if kind not in ("not published", "waiting to publish"):
            rows[kind] += s.records
    bad = sum(s.bad_records for s, _ in sources)
    out = [_headline(report, kinds, rows, bad)]
    problems = _grouped(_problems(report, sources, rel))
    out += [f"  {what:<18} {where}{('  ' + why) if why else ''}" for what, where, why in problems[:SHOWN]]
    if len(problems) > SHOWN:
        out.append(f"  ... and {len(problems) - SHOWN} more: make query WORKDIR={rel(report.workdir)} {MORE_SQL}")
    for table in report.tables:
        dup = ""
        if table.duplicates is not None:
            # with earlier versions kept beside (ON_OVERWRITE=append), a line is once per version
            pair = "(source version, line)" if table.earlier_rows else "(source, line)"
            dup = f", each {pair} once" if not table.duplicates else f", {table.duplicates:,} {pair} pairs twice"
        if table.earlier_rows:
            dup += (
                f"; {table.earlier_rows:,} row{'s' * (table.earlier_rows != 1)} of earlier versions of changed "
                "files kept beside the latest (_source_etag tells the versions apart)"
            )
        out.append(
            f"table {table.name}: {table.rows:,} row{'s' * (table.rows != 1)} in {table.files:,} Parquet "
            f"file{'s' * (table.files != 1)} ({size(table.bytes)}){dup}"
        )
    unrouted = sum(1 for s, _ in sources if s.reason == REASON_UNROUTED)
    if unrouted and not kinds["loaded"] + kinds["loaded in part"]:
        out.append(
            f"hint: no route took any of the {unrouted:,} files: a route's prefix is matched against the key, the "
            "path under DATA locally (no bucket or folder name before it); fix the routing file, then make reconcile "
            f"WORKDIR={rel(report.workdir)} REQUEUE=1 and make run"
        )
    workdir = rel(report.workdir)
    out.append(
        f"query: make query WORKDIR={workdir} [SQL=...] (load_history and quarantine too); "
        f"metrics: make metrics WORKDIR={workdir}"
    )
    return "\n".join(out)


HEADLINE_ORDER = (
    "extended",
    "loaded in part",
    "empty",
    "every line quarantined",
    "not published",
    "waiting to publish",
    "missing",
    "unreadable",
    "quarantined whole",
    "ignored",
    "retracted",
    "deleted",
    "carried over",
)


def _headline(report: RunReport, kinds: Counter[str], rows: Counter[str], bad: int) -> str:
    """Each file counted once: the parts add up to the files this run saw; rows are said with the
    files they came from (a truncated gzip's 10,309 rows are not the whole files')."""

    def rows_of(kind: str) -> str:
        return f" ({rows[kind]:,} row{'s' * (rows[kind] != 1)})"

    others = [k for k in HEADLINE_ORDER if kinds[k]]
    loaded = rows_of("loaded") if kinds["loaded"] or not any(rows[k] for k in others) else ""
    parts = [f"{kinds['loaded']:,} loaded{loaded}"]
    parts += [f"{kinds[k]:,} {k}{rows_of(k) if rows[k] else ''}" for k in others]
    parts += [f"{kinds[k]:,} {k}" for k in ("already loaded", "superseded") if kinds[k]]
    if bad:
        parts.append(_quarantined(bad, report.quarantined))
    batches = len(report.records)
    new = report.fed_files - report.changed_files - report.removed_files + len(report.ignored)
    changed = f", {report.changed_files:,} changed" if report.changed_files else ""
    changed += f", {report.removed_files:,} deleted" if report.removed_files else ""
    return (
        f"your files: {new:,} new{changed}; "
        + ", ".join(parts)
        + f" ({batches} batch{'es' * (batches != 1)}, {report.seconds:.1f} s)"
    )


def _quarantined(bad: int, quarantined: Sequence[dict[str, Any]]) -> str:
    """The headline's count of what was quarantined: ``bad`` records. Said in lines when every one
    of them is in hand (the summary reads the first few): the elements of a line that is a JSON
    array are records of one line. Otherwise in records, the unit the count is in."""
    lines = [(q.get("source_uri"), q.get("line")) for q in quarantined if q.get("kind") == "line"]
    if len(lines) != bad:
        return f"{bad:,} record{'s' * (bad != 1)} quarantined"
    n = len(set(lines))
    return f"{n:,} line{'s' * (n != 1)} quarantined" + (f" ({bad:,} records)" if n != bad else "")


def _problems(
    report: RunReport, sources: Sequence[tuple[SourceRecord, str]], rel: Callable[[Path], str]
) -> list[tuple[str, str, str]]:
    """(what, where, why) of each thing the user should know: files the table refused, lines and
    files quarantined, files loaded in part or not at all, files ignored, values that did not
    convert or partition, keys renamed."""

    def path_of(key: str) -> str:
        return rel(report.data / key)

    out: list[tuple[str, str, str]] = []
    reasons = {key: why for key, (_, why) in report.unpublished.items()}
    for record in report.records:
        for s in record.sources:
            if report.outcome(record, s) == "not published":
                why = reasons.get((record.batch_id, s.table or ""), "")
                out.append(("not published", path_of(s.key), why))
    for q in report.quarantined:
        uri = str(q.get("source_uri", ""))
        where = path_of(uri.removeprefix(LANDING)) if uri.startswith(LANDING) else uri
        if q.get("kind") == "line":
            out.append(("line quarantined", f"{where}:{q.get('line')}", str(q.get("reason", ""))))
        elif q.get("kind") == "rule":
            out.append(("rule broken", f"{where}:{q.get('line')}", str(q.get("reason", ""))))
    for s, kind in sources:
        if kind in ("loaded", "already loaded", "not published"):
            continue
        why = s.reason or ("no record in it: nothing to load" if kind == "empty" else "")
        if s.reason == REASON_UNROUTED:  # the key the routes were matched against
            why = f"key {s.key}: {why}"
        if kind == "extended":
            why = f"only its lines from {s.from_line} on were read: it extends the version loaded (on_overwrite: tail)"
        if kind == "carried over":
            why += f"; make run WORKDIR={rel(report.workdir)} loads it"
        if kind == "loaded in part":
            why = f"{s.records:,} rows loaded, then: {why}"
        out.append((kind, path_of(s.key), why))
    why_ignored = "not .json, .ndjson, .jsonl or .gz (case-sensitive, as on S3)"
    out += [("ignored", path_of(k), why_ignored) for k in report.ignored]
    out += _values(report, rel(report.workdir))
    fresh = {t: tuple(set(keys) - set(report.shown_keys.get(t, ()))) for t, keys in report.known_keys.items()}
    out += [(f"column {name}", f'key "{key}"', why) for key, name, why in renamed(report.known_keys, only=fresh)]
    return out


def _grouped(problems: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Each (what, where, why) once, with how many times it came: the elements of a line that is a
    JSON array (``[1,2,3]``: three records, all of line 1) were three identical lines."""
    seen = Counter(problems)
    out = []
    for item in dict.fromkeys(problems):
        what, where, why = item
        n = seen[item]
        if n > 1:
            why = f"{why} ({n:,} {'records of the line' if what == 'line quarantined' else 'times'})"
        out.append((what, where, why))
    return out


def _values(report: RunReport, workdir: str) -> list[tuple[str, str, str]]:
    """Values that did not land where their key says: declared types that did not convert, rows in
    the null partition, values past the column bound."""
    total = Counter[str]()
    rules = Counter[tuple[str, str]]()  # (table, rule) -> rows that broke it
    for record in report.records:
        for share in record.tables:
            total["replaced"] += sum(1 for r in share.replaced if r.status == "replaced")
            total["rows_removed"] += share.stats.rows_removed
            for rule, n in share.stats.rule_violations.items():
                rules[share.table, rule] += n
        total["rescued"] += record.stats.rescued_values
        total["null"] += record.stats.null_partition_records
        total["extra"] += record.stats.extra_values
    out = []
    if total["replaced"]:
        out.append(
            (
                "versions replaced",
                f"{total['replaced']:,} file{'s' * (total['replaced'] != 1)}",
                f"changed since loaded: {total['rows_removed']:,} rows of their earlier versions removed in the commit "
                "that added the new (on_overwrite: replace)",
            )
        )
    for table, pairs in sorted(report.misnamed.items()):
        for column, key in pairs:
            out.append(
                (
                    f"rule column {column}",
                    f"table {table}",
                    f'no record has "{column}"; they have "{key}" (names are case-sensitive): every row breaks '
                    "the rules that read it",
                )
            )
    for (table, rule), n in sorted(rules.items()):
        mode = report.rule_modes.get((table, rule), "")
        # a rule's name is letters, digits and _ (contracts.routing.RULE_NAME_PATTERN): nothing to escape
        sql = f"SELECT key, line, reason, raw FROM quarantine WHERE rule = '{rule}'"  # noqa: S608
        what = {
            "quarantine": f'broke it: in the quarantine table, not the table; make query WORKDIR={workdir} SQL="{sql}"',
            "drop": "broke it: dropped (on_fail: drop), counted in load_history.rule_violations",
            "warn": "broke it: kept (on_fail: warn), counted in load_history.rule_violations",
        }.get(mode, "broke it (counted in load_history.rule_violations)")
        out.append((f"rule {rule}", f"{n:,} row{'s' * (n != 1)} of {table}", what))
    if total["rescued"]:
        out.append(
            (
                "values rescued",
                f"{total['rescued']:,} value{'s' * (total['rescued'] != 1)}",
                "did not convert to their declared type: kept as text in _rescued; "
                + f"make query WORKDIR={workdir} "
                + RESCUED_SQL.replace("TABLE", _view(report)),
            )
        )
    if total["null"]:
        out.append(
            (
                "null partition",
                f"{total['null']:,} row{'s' * (total['null'] != 1)}",
                "had no value for a partition column, or one that did not convert: they are in the null partition",
            )
        )
    if total["extra"]:
        out.append(
            (
                "values in _extra",
                f"{total['extra']:,} value{'s' * (total['extra'] != 1)}",
                "past the table's column bound, with no column of their own, or another case of a column's key "  # noqa: S608 - a hint printed
                f"(Athena and Glue cannot tell them apart): kept in _extra (a JSON object); their keys: make query "
                f'WORKDIR={workdir} SQL="SELECT DISTINCT unnest(map_keys(_extra)) AS key FROM {_view(report)}"',
            )
        )
    return out


def _view(report: RunReport) -> str:
    """The view ``make query`` gives the table (its name), or a placeholder when there are several."""
    names = [t.name.split(".", 1)[-1] for t in report.tables]
    return names[0] if len(names) == 1 else "<table>"


def renamed(
    known: dict[str, tuple[str, ...]], *, only: dict[str, tuple[str, ...]] | None = None
) -> list[tuple[str, str, str]]:
    """Keys whose column is not named as they are: (key, column, why). Athena and Glue resolve names
    without case, so of keys that differ only in case one keeps the name and the others get a suffix.
    ``only``: of each table, just these keys (the ones a run brought)."""
    out = []
    for table, keys in known.items():
        wanted = None if only is None else set(only.get(table, ()))
        by_lower: dict[str, list[str]] = {}
        for key in keys:
            by_lower.setdefault(key.lower(), []).append(key)
        names = column_names(keys)
        column_of = dict(names)
        for key, name in names:
            if key and key != name and (wanted is None or key in wanted):
                twins = [k for k in by_lower.get(key.lower(), []) if k != key]
                # the twin whose column has the plain name: what SQL's bare name reads (a newcomer's
                # SELECT id read ID's column, all NULL where only id was given, and took it for a loss)
                plain = [k for k in twins if column_of[k].lower() == key.lower()]
                reads = f'; SQL\'s {key} reads the column of "{plain[0]}"' if plain else ""
                why = (
                    f'differs from "{twins[0]}" only in case (Athena and Glue cannot tell them apart): query '
                    f'{name}, every file\'s "{key}" is there{reads}'
                    if twins
                    else f"a name of the job's own: query {name}"
                )
                out.append((key, name, why))
    return out


def _relative(here: Path) -> Callable[[Path], str]:
    return lambda path: shown(path, here)


def size(n: int) -> str:
    """A byte count as a person reads it: kB below 0.1 MB (a small file is not "0.0 MB")."""
    if n < 1000:
        return f"{n} B"
    return f"{n / 1e3:,.1f} kB" if n < 100_000 else f"{n / MB:,.1f} MB"


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
