"""Grouping accepted objects into bounded manifests (pure functions, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from contracts.manifest import Manifest, ManifestEntry


@dataclass(frozen=True)
class MessageEntries:
    """The accepted entries of one SQS message: a message goes into one manifest, whole."""

    message_id: str
    entries: tuple[ManifestEntry, ...]


@dataclass(frozen=True)
class PlannedManifest:
    manifest: Manifest
    message_ids: frozenset[str]


@dataclass
class Plan:
    manifests: list[PlannedManifest] = field(default_factory=list)
    duplicates_dropped: int = 0
    empty_messages: list[str] = field(default_factory=list)


def plan_manifests(messages: Sequence[MessageEntries], *, max_bytes: int, max_files: int) -> Plan:
    """Pack messages into manifests bounded by total bytes and file count.

    Of the events of one object version (bucket, key, eTag) in this batch, the newest is kept (S3's
    sequencer orders the events of one key; the event time breaks ties): an object uploaded twice
    with the same bytes is listed by its latest event, which the job's overwrite check accepts.
    Messages are packed in a canonical order, so the same batch always yields the same manifests
    (and so the same manifest names). An object larger than ``max_bytes`` gets a manifest of its
    own; a message whose objects exceed a bound on their own is split across manifests.
    """
    plan = Plan()
    newest = _newest_events(messages)
    seen: set[tuple[str, str, str]] = set()
    current: list[ManifestEntry] = []
    current_ids: set[str] = set()
    current_bytes = 0

    def close() -> None:
        nonlocal current, current_ids, current_bytes
        if current:
            plan.manifests.append(PlannedManifest(Manifest.of(current), frozenset(current_ids)))
        current, current_ids, current_bytes = [], set(), 0

    for message in sorted(messages, key=_canonical_order):
        fresh = []
        for entry in sorted(message.entries, key=lambda e: e.identity):
            if entry.identity in seen or newest[entry.identity] is not entry:
                plan.duplicates_dropped += 1
                continue
            seen.add(entry.identity)
            fresh.append(entry)
        if not fresh:
            plan.empty_messages.append(message.message_id)
            continue
        message_bytes = sum(e.size for e in fresh)
        if current and (current_bytes + message_bytes > max_bytes or len(current) + len(fresh) > max_files):
            close()
        for entry in fresh:
            if current and (current_bytes + entry.size > max_bytes or len(current) + 1 > max_files):
                close()
            current.append(entry)
            current_ids.add(message.message_id)
            current_bytes += entry.size
    close()
    return plan


def sequencer_order(sequencer: str | None) -> str:
    """S3 sequencers of one key compare as hex strings of equal length (S3 User Guide, "Event message
    structure": pad the shorter with zeros on the left before comparing)."""
    return (sequencer or "").upper().rjust(64, "0")


def _newest_events(messages: Sequence[MessageEntries]) -> dict[tuple[str, str, str], ManifestEntry]:
    newest: dict[tuple[str, str, str], ManifestEntry] = {}
    for message in sorted(messages, key=_canonical_order):  # ties keep the first in canonical order
        for entry in message.entries:
            best = newest.get(entry.identity)
            key = (sequencer_order(entry.sequencer), entry.event_time)
            if best is None or key > (sequencer_order(best.sequencer), best.event_time):
                newest[entry.identity] = entry
    return newest


def _canonical_order(message: MessageEntries) -> tuple[tuple[str, str, str], str]:
    first = min((e.identity for e in message.entries), default=("", "", ""))
    return (first, message.message_id)
