"""What a batch found out about its objects: sources, rejections, parts, counts, the batch's columns.

The parse tasks report per object (or per byte range of one); :func:`gather` folds their results
into one :class:`Outcome`, one status per object (ingested, empty, missing, unreadable,
superseded), and admits the keys the objects brought, in object order, while the column bound has
room (tasks admit keys in parallel; a part with keys past the cut is folded when it is written).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from contracts.ledger import SourceRecord, object_identity
from glue_processor.plan.manifests import BatchPlan, Rejection, SourceFile
from glue_processor.plan.ranges import object_outcomes
from glue_processor.plan.tasks import gzipped
from glue_processor.read.parts import Staged
from glue_processor.read.task import TaskResult
from glue_processor.shared.extra import admit
from glue_processor.shared.names import StableNames
from glue_processor.shared.spec import FileOutcome

REASON_UNROUTED = "no route of the routing file leads its key to a table (unmatched: ignore)"
REASON_ALL_BAD = "no line loaded: every line was quarantined"
REASON_NONE_KEPT = "no row kept: {} dropped by the table's rules (on_fail: drop), the others quarantined"


class Outcome:
    """What a batch found out about its sources, accumulated while it runs: the driver's (``plan``:
    bad manifests and entries, duplicates, objects no route takes) or one table's share (``table``)."""

    def __init__(self, plan: BatchPlan | None = None, *, table: str | None = None) -> None:
        self.table = table
        self.rejections: list[Rejection] = list(plan.rejections) if plan is not None else []
        self.sources: list[SourceRecord] = []
        self.data_files: list[Staged] = []
        self.quarantine_files: list[Staged] = []
        self.final_keys: tuple[str, ...] = ()
        self.text_bytes = 0
        self.gzip_bytes = 0
        self.gzip_text_bytes = 0
        self.records_out = 0
        self.bad_records = 0
        self.rescued = 0
        self.extra_values = 0
        self.dropped = 0  # rows drop rules removed
        self.rules_s = 0.0  # task seconds spent checking rows against the table's rules
        self.violations: dict[str, int] = {}  # rule -> rows that broke it
        self.object_violations: dict[str, dict[str, int]] = {}  # object_identity -> rule -> rows
        self.null_partitions = 0
        # rows moved to the null partition past the share's partition limit, by the parse tasks or
        # the write stage (glue_processor.write.overflow)
        self.overflow_records = 0
        # objects read in part: their read stopped at a line (a gzip break, the text cap) or a byte
        # range of theirs could not be read; their rows up to there are loaded, the rest quarantined
        self.partial: set[tuple[str, str, str, str | None]] = set()
        if plan is None:
            return
        for rejection in plan.rejections:
            if rejection.entry is not None:
                self._record(rejection.entry, rejection.manifest_uri, "rejected", reason=rejection.reason)
        for dup, why in plan.duplicates:
            self._record(dup.entry, dup.manifest_uri, "duplicate", reason=why, table=dup.table)
        for item in plan.ignored:
            self._record(item.entry, item.manifest_uri, "ignored", reason=REASON_UNROUTED)
        for item, status, why in plan.skipped:
            self._record(item.entry, item.manifest_uri, status, reason=why, table=item.table)
        for item in plan.carried:
            self._record(item.entry, item.manifest_uri, "carried", reason=plan.carried_reason, table=item.table)

    def read(self, source: SourceFile, found: FileOutcome) -> None:
        """An object that was read and parsed (ingested, or empty). Its record says why when it is
        not whole: reading stopped at a line (a gzip break, the text cap), or every line it has was
        quarantined (no longer told from an object with no line at all)."""
        self.records_out += found.good
        self.bad_records += found.bad
        self.dropped += found.dropped
        for rule, n in found.violations:
            self.violations[rule] = self.violations.get(rule, 0) + n
        if found.violations:
            e = source.entry
            self.object_violations[object_identity(e.bucket, e.key, e.etag, e.version_id)] = dict(found.violations)
        self.text_bytes += found.text_bytes
        if gzipped(source):
            self.gzip_bytes += source.entry.size
            self.gzip_text_bytes += found.text_bytes
        reason = found.reason
        if reason is not None:
            self.partial.add(_identity(source))
        if reason is None and (found.bad or found.dropped) and not found.good:
            reason = f"{REASON_ALL_BAD} ({found.bad})" if not found.dropped else REASON_NONE_KEPT.format(found.dropped)
        self._record(
            source.entry,
            source.manifest_uri,
            found.status,
            records=found.good,
            bad=found.bad,
            reason=reason,
            text=source.text,
            from_line=source.tail_line if source.tail_from else 1,
        )

    def add(self, source: SourceFile, status: Any, *, reason: str | None = None) -> None:
        self._record(source.entry, source.manifest_uri, status, reason=reason)

    def file_problem(self, source: SourceFile, status: Any, reason: str) -> None:
        """A missing or unreadable object: quarantined whole."""
        self.rejections.append(Rejection("file", source.source_uri, reason, source.manifest_uri, entry=source.entry))
        self._record(source.entry, source.manifest_uri, status, reason=reason)

    def refuse(self, share: Outcome, files: Sequence[SourceFile], reason: str) -> None:
        """A share its table would refuse (before the commit record): the objects it read are
        quarantined whole with the reason, and recorded as rejected, in this (the driver's) outcome."""
        loaded = {(s.bucket, s.key, s.etag, s.version_id) for s in share.sources if s.status in ("ingested", "empty")}
        for f in files:
            e = f.entry
            if (e.bucket, e.key, e.etag, e.version_id) in loaded:
                self.rejections.append(Rejection("file", f.source_uri, reason, f.manifest_uri, entry=e))
                self._record(e, f.manifest_uri, "rejected", reason=reason, table=share.table)
            # what it could not read is in its share already (missing, unreadable): kept as it is
        share.sources = [s for s in share.sources if s.status not in ("ingested", "empty")]
        # nothing of it is written: its files and its bad lines' records go (a requeue reads it again)
        share.data_files, share.quarantine_files = [], []
        share.records_out = share.bad_records = share.rescued = share.extra_values = share.null_partitions = 0
        share.dropped, share.violations, share.object_violations = 0, {}, {}
        share.overflow_records = 0
        share.partial = set()

    def count(self, status: str) -> int:
        return sum(1 for s in self.sources if s.status == status)

    def _record(self, entry: Any, manifest_uri: str, status: Any, **extra: Any) -> None:
        self.sources.append(
            SourceRecord(
                bucket=entry.bucket,
                key=entry.key,
                etag=entry.etag,
                size=entry.size,
                event_time=entry.event_time,
                manifest_uri=manifest_uri,
                status=status,
                records=extra.get("records", 0),
                bad_records=extra.get("bad", 0),
                reason=extra.get("reason"),
                version_id=entry.version_id,
                table=extra.get("table", self.table),
                sequencer=entry.sequencer,
                text=extra.get("text"),
                from_line=extra.get("from_line", 1),
            )
        )


def gather(
    outcome: Outcome,
    files: list[SourceFile],
    results: Sequence[TaskResult],
    unread: Sequence[FileOutcome],
    *,
    known: set[str],
    max_columns: int,
    held: Collection[str] = (),
) -> set[str]:
    """Fold the tasks' ``results`` (and the objects left ``unread``) into ``outcome``; the keys known
    after the batch (``known`` and the new ones admitted as columns; ``outcome.final_keys`` too). A
    new key that would rename a column of ``known`` or ``held`` is not admitted (``StableNames``)."""
    found_by_object, lost = object_outcomes([*unread, *(found for r in results for found in r.files)])
    keys = sorted(known)
    seen = set(keys)
    names = StableNames(known, held)
    losers = case_losers(results, found_by_object, known=known, held=held)

    def joins(key: str) -> bool:
        return key not in losers and names.join(key)

    for result in sorted(results, key=lambda r: r.index):
        outcome.rescued += result.rescued
        outcome.extra_values += result.extra_values
        outcome.rules_s += result.rules_s
        outcome.null_partitions += result.null_partitions
        outcome.overflow_records += result.overflow_records
        outcome.data_files.extend(result.data)
        outcome.quarantine_files.extend(result.quarantine)
    for found in found_by_object:
        source = files[found.item]
        if found.status in ("missing", "unreadable"):
            outcome.file_problem(source, found.status, found.reason or found.status)
        elif found.status == "superseded":
            outcome.add(source, "superseded", reason=found.reason)
        else:
            admit(keys, seen, found.new_keys, max_columns, joins)
            outcome.read(source, found)
    for part in lost:  # a range that could not be read, of an object whose other ranges loaded
        source = files[part.item]
        outcome.rejections.append(Rejection("file", source.source_uri, part.reason or "", source.manifest_uri))
        outcome.partial.add(_identity(source))
    outcome.final_keys = tuple(sorted(keys))
    return seen


def case_losers(
    results: Sequence[TaskResult], found: Sequence[FileOutcome], *, known: Collection[str], held: Collection[str] = ()
) -> frozenset[str]:
    """Of the keys new to a table in a batch that differ only in case (``kind`` and ``Kind``), all
    but the one with the most values across the batch (ties: the first in sorted order, lower case
    before upper: ``kind`` before ``Kind``, ``userId`` before ``userID``): their
    values go to ``_extra``, as a case variant of a column the table has does. Named together, the
    two would be columns ``Kind`` and ``kind__2`` by their sorted order, however many rows each is
    in: one stray ``Kind`` among 1.6M lines of ``kind`` named the dataset's column ``kind__2`` and
    left ``kind`` in SQL reading NULL (a newcomer's backfill)."""
    values: dict[str, int] = {}
    for result in results:  # (of the rows the table's rules kept)
        for key, n in result.new_key_values:
            values[key] = values.get(key, 0) + n
    for outcome in found:  # a key with no value counted (a NULL only) is a candidate all the same
        for key in outcome.new_keys:
            values.setdefault(key, 0)
    taken = set(known) | set(held)
    cases: dict[str, list[str]] = {}
    for key in values:
        if key not in taken:
            cases.setdefault(key.lower(), []).append(key)
    losers: set[str] = set()
    for variants in cases.values():
        if len(variants) > 1:
            winner = min(variants, key=lambda k: (-values[k], k.swapcase(), k))  # k last: a total order
            losers.update(k for k in variants if k != winner)
    return frozenset(losers)


def _identity(source: SourceFile) -> tuple[str, str, str, str | None]:
    e = source.entry
    return (e.bucket, e.key, e.etag, e.version_id)
