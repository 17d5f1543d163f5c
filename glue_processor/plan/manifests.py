"""From a micro-batch's manifests to the list of objects to read (pure Python, no Spark).

Bad manifests and entries become quarantine records here, before any data is read, so one bad
manifest never fails the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from contracts.exceptions import ManifestError
from contracts.layout import source_uri
from contracts.ledger import TextPrint
from contracts.manifest import Manifest, ManifestEntry
from glue_processor.settings import JobSettings


@dataclass(frozen=True)
class SourceFile:
    """One object version to read in this batch."""

    entry: ManifestEntry
    manifest_uri: str
    read_uri: str
    table: str = ""  # the table its route names
    # on_overwrite tail (docs/mirror.md): the version's text print, and where its read starts when it
    # extends the version loaded (the byte past that one's last line end, and that line's number)
    text: TextPrint | None = None
    tail_from: int = 0
    tail_line: int = 1

    @property
    def source_uri(self) -> str:
        return source_uri(self.entry.bucket, self.entry.key)


@dataclass(frozen=True)
class Rejection:
    """A quarantine record made on the driver (a whole manifest or a whole file)."""

    kind: str
    source_uri: str
    reason: str
    manifest_uri: str
    raw: str | None = None
    entry: ManifestEntry | None = None


@dataclass
class BatchPlan:
    manifests: list[str] = field(default_factory=list)
    files: list[SourceFile] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    duplicates: list[tuple[SourceFile, str]] = field(default_factory=list)
    ignored: list[SourceFile] = field(default_factory=list)  # no route leads to a table: not read
    # not read, against what a mirroring table holds of their keys: (object, status, reason)
    skipped: list[tuple[SourceFile, str, str]] = field(default_factory=list)
    # deletions of keys (removed entries): never read; a table with on_delete retract removes their rows
    removals: list[SourceFile] = field(default_factory=list)
    # objects (and deletions) left to a later batch, in a manifest of their own, and why
    carried: list[SourceFile] = field(default_factory=list)
    carried_reason: str = ""
    bad_manifests: int = 0

    @property
    def input_bytes(self) -> int:
        return sum(f.entry.size for f in self.files)

    def input_bytes_of(self, table: str) -> int:
        return sum(f.entry.size for f in self.files if f.table == table)

    def by_table(self) -> dict[str, list[SourceFile]]:
        """The files to read, per table, in batch order (each table's share)."""
        out: dict[str, list[SourceFile]] = {}
        for f in self.files:
            out.setdefault(f.table, []).append(f)
        return out


def plan_batch(
    manifests: Iterable[tuple[str, str]],
    settings: JobSettings,
    *,
    ingested: IngestedLookup | None = None,
    route: Callable[[str], str | None] | None = None,
) -> BatchPlan:
    """Parse the batch's manifests (uri, text) and decide what to read, and into which table.

    - a manifest that is not valid JSON or fails its schema is quarantined whole;
    - an entry outside ``allowed_buckets`` is quarantined;
    - an entry larger than ``max_file_mb`` (stored bytes) is quarantined;
    - an entry whose key no route leads to a table (``route`` says None) is ignored: not read;
    - an object version listed again in this batch is read once;
    - an object version already ingested by an earlier batch (``ingested``: which batch, within the
      dedupe window; one lookup for the whole batch) is not read again.
    """
    plan = BatchPlan()
    candidates: list[SourceFile] = []
    seen: set[tuple[str, str, str]] = set()
    for manifest_uri, text in sorted(manifests):
        plan.manifests.append(manifest_uri)
        try:
            manifest = Manifest.from_json(text, source=manifest_uri)
        except ManifestError as exc:
            plan.bad_manifests += 1
            plan.rejections.append(Rejection("manifest", manifest_uri, str(exc), manifest_uri, raw=text[:1_000_000]))
            continue
        for entry in manifest.entries:
            reason = _entry_problem(entry, settings)
            if reason:
                plan.rejections.append(
                    Rejection("file", source_uri(entry.bucket, entry.key), reason, manifest_uri, entry=entry)
                )
                continue
            table = route(entry.key) if route is not None else settings.table_name
            item = SourceFile(entry, manifest_uri, settings.source_uri_of(entry.bucket, entry.key), table or "")
            if table is None:
                plan.ignored.append(item)
                continue
            if entry.removed:
                if entry.identity not in seen:
                    seen.add(entry.identity)
                    plan.removals.append(item)
                continue
            if entry.identity in seen:
                plan.duplicates.append((item, "listed again in this batch"))
                continue
            seen.add(entry.identity)
            candidates.append(item)
    earlier = ingested.lookup([c.entry.identity for c in candidates]) if ingested else [None] * len(candidates)
    for item, batch in zip(candidates, earlier, strict=True):
        if batch is None:
            plan.files.append(item)
        else:
            plan.duplicates.append((item, f"already ingested by batch {batch}"))
    return plan


class IngestedLookup(Protocol):
    """Which earlier batch ingested each object version (None: none within the dedupe window)."""

    def lookup(self, identities: Sequence[Sequence[str]]) -> list[int | None]: ...


def _entry_problem(entry: ManifestEntry, settings: JobSettings) -> str | None:
    if settings.allowed_buckets and entry.bucket not in settings.allowed_buckets:
        return f"bucket {entry.bucket!r} is not in allowed_buckets {list(settings.allowed_buckets)}"
    if settings.allowed_prefixes and not entry.key.startswith(settings.allowed_prefixes):
        return f"key {entry.key!r} is not under allowed_prefixes {list(settings.allowed_prefixes)}"
    if entry.size > settings.max_file_mb * 1024 * 1024:
        return f"object of {entry.size} bytes exceeds max_file_mb={settings.max_file_mb}"
    return None


def latency_seconds(event_times: Iterable[datetime], committed_at: datetime) -> list[float]:
    return sorted(max(0.0, (committed_at - t).total_seconds()) for t in event_times)


def poison_plan(manifests: Iterable[tuple[str, str]], reason: str) -> BatchPlan:
    """A plan that reads nothing and quarantines every manifest of a batch that keeps failing."""
    plan = BatchPlan()
    for manifest_uri, text in sorted(manifests):
        plan.manifests.append(manifest_uri)
        plan.bad_manifests += 1
        plan.rejections.append(Rejection("manifest", manifest_uri, reason, manifest_uri, raw=text[:1_000_000]))
    return plan
