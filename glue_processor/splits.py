"""A large plain object read by several parse tasks: its byte ranges, their line numbers, and one
outcome per object from its ranges' outcomes.

The driver splits such an object into ranges (:func:`glue_processor.sizing.plan_pieces`). A range
owns the lines that start in it (:class:`glue_processor.reading.OwnedLines`), so every line is
read once whatever the cut points. Line numbers must be the object's own, so before the parse
tasks run, one task per range counts the lines that start in it (a pass of ``bytes.count`` over
the range, which costs a second read of the bytes but no parsing), and each range's first line is
the count of the ranges before it plus one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import groupby

from glue_processor.objects import ObjectMissing, ObjectStore, VersionGone, store_for
from glue_processor.reading import line_starts, read_from
from glue_processor.tasks import (
    REASON_MISSING,
    REASON_SUPERSEDED,
    REASON_VERSION_GONE,
    FileOutcome,
    FileTask,
    _version,
    overwritten,
)

# an object's outcome from its ranges': a range that could not be read spoils none of the others
_PROBLEMS = ("missing", "superseded", "unreadable")


@dataclass(frozen=True)
class RangeLines:
    """How many lines start in a range, or why it could not be read (``status`` not "ok")."""

    item: int
    start: int
    lines: int = 0
    status: str = "ok"
    reason: str | None = None


def count_lines(item: FileTask, stores: Callable[[str], ObjectStore] = store_for) -> RangeLines:
    """The lines that start in ``item``'s range (a Spark task: one per range)."""
    assert item.end is not None, "only ranges are counted"
    try:
        with stores(item.read_uri).open(item.read_uri, **_version(item), start=read_from(item.start)) as body:
            if not body.exact and overwritten(body.modified_epoch_s, item.event_time):
                return RangeLines(item.item, item.start, status="superseded", reason=REASON_SUPERSEDED)
            return RangeLines(item.item, item.start, line_starts(body.stream, start=item.start, end=item.end))
    except ObjectMissing as exc:
        reason = REASON_MISSING if item.version_id is None else f"{REASON_MISSING}: {exc}"
        return RangeLines(item.item, item.start, status="missing", reason=reason)
    except VersionGone:
        return RangeLines(item.item, item.start, status="superseded", reason=REASON_VERSION_GONE)


def number_ranges(
    items: Sequence[FileTask], run: Callable[[Callable[[FileTask], RangeLines], list[FileTask]], list[RangeLines]]
) -> tuple[list[FileTask], list[FileOutcome]]:
    """Each range with its first line number, counted by ``run`` (one task per range). An object
    one of whose ranges could not be counted is not read at all: it comes back as one outcome
    saying why (so nothing of it is loaded, rather than some of its lines)."""
    ranges = [i for i in items if i.end is not None]
    counts = {(c.item, c.start): c for c in run(count_lines, ranges)} if ranges else {}
    first: dict[tuple[int, int], int] = {}
    spoiled: dict[int, tuple[FileTask, RangeLines]] = {}
    for obj, group in groupby(sorted(ranges, key=lambda i: (i.item, i.start)), key=lambda i: i.item):
        line = 1
        for item in group:
            count = counts[obj, item.start]
            if count.status != "ok":
                spoiled.setdefault(obj, (item, count))
            first[obj, item.start] = line
            line += count.lines
    numbered = [
        i if i.end is None else replace(i, first_line=first[i.item, i.start]) for i in items if i.item not in spoiled
    ]
    problems = [FileOutcome(i.read_uri, c.status, reason=c.reason, item=i.item) for i, c in spoiled.values()]
    return numbered, problems


def object_outcomes(outcomes: Iterable[FileOutcome]) -> tuple[list[FileOutcome], list[FileOutcome]]:
    """One outcome per object from its ranges' (an object read whole has one already), and the
    ranges that could not be read of objects whose other ranges loaded (each becomes a quarantine
    record saying which bytes were not loaded)."""
    merged: list[FileOutcome] = []
    lost: list[FileOutcome] = []
    for _, group in groupby(sorted(outcomes, key=lambda o: (o.item, o.start)), key=lambda o: o.item):
        parts = list(group)
        if len(parts) == 1 and parts[0].end is None:
            merged.append(parts[0])
            continue
        read = [p for p in parts if p.status not in _PROBLEMS]
        failed = [p for p in parts if p.status in _PROBLEMS]
        good = sum(p.good for p in read)
        if not good and failed:  # nothing loaded: the object is quarantined whole, as if read whole
            merged.append(replace(failed[0], start=0, end=None, bad=sum(p.bad for p in parts)))
            continue
        keys: dict[str, None] = {}
        for p in read:
            keys.update(dict.fromkeys(p.new_keys))
        merged.append(
            FileOutcome(
                parts[0].read_uri,
                "ingested" if good else "empty",
                good=good,
                bad=sum(p.bad for p in read),
                text_bytes=sum(p.text_bytes for p in read),
                new_keys=tuple(keys),
                reason=next((p.reason for p in read if p.reason), None),
                item=parts[0].item,
            )
        )
        lost.extend(failed)
    return merged, lost
