"""A large plain object read by several parse tasks: its byte ranges, their line numbers, and one
outcome per object from its ranges' outcomes.

The driver splits such an object into ranges (:func:`glue_processor.plan.sizing.plan_pieces`). A range
owns the lines that start in it (:class:`glue_processor.shared.text.OwnedLines`), so every line is
read once whatever the cut points. Line numbers must be the object's own, so before the parse
tasks run, one task per range but the last counts the lines that start in it (a native LF count
over the range, which costs a second read of the bytes but no parsing), and each range's first
line is the count of the ranges before it plus one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import groupby
from typing import BinaryIO

from glue_processor.shared.objects import ObjectStore, store_for
from glue_processor.shared.spec import FileOutcome, FileTask
from glue_processor.shared.text import BOM, SNIFF_BYTES, is_document, line_starts, read_from
from glue_processor.shared.version import REASON_UNREADABLE, NotReadable, byte_range, event_version

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
    document: bool = False  # the object's first range: it is a JSON document, to be read whole


def count_lines(item: FileTask, stores: Callable[[str], ObjectStore] = store_for) -> RangeLines:
    """The lines that start in ``item``'s range (a Spark task: one per range but the last)."""
    assert item.end is not None, "the last range is not counted: no range comes after it"
    first = read_from(item.start)
    try:
        with event_version(item, stores, length=max(1, item.end - 1 - first)) as body:
            stream: BinaryIO = body
            if item.start == 0:  # where the object starts: is it NDJSON at all?
                head = body.read(SNIFF_BYTES + len(BOM))
                if is_document(head):
                    return RangeLines(item.item, item.start, document=True)
                stream = _Replay(head, body)  # type: ignore[assignment]
            return RangeLines(item.item, item.start, line_starts(stream, start=item.start, end=item.end))
    except NotReadable as exc:
        return RangeLines(item.item, item.start, status=exc.status, reason=exc.reason)
    except (OSError, EOFError) as exc:  # the stream broke: as when a parse task's read breaks
        return RangeLines(item.item, item.start, status="unreadable", reason=f"{REASON_UNREADABLE}: {exc}"[:1000])


class _Replay:
    """A stream whose first bytes were read already: them, then the rest."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head, self._stream = head, stream

    def read(self, size: int = -1) -> bytes:
        if not self._head:
            return self._stream.read(size)
        if size < 0 or size >= len(self._head):
            head, self._head = self._head, b""
            return head
        head, self._head = self._head[:size], self._head[size:]
        return head


def number_ranges(
    items: Sequence[FileTask], run: Callable[[Callable[[FileTask], RangeLines], list[FileTask]], list[RangeLines]]
) -> tuple[list[FileTask], list[FileOutcome]]:
    """Each range with its first line number, from the lines counted in the ranges before it by
    ``run`` (one task per range but the last). An object one of whose ranges could not be counted
    is not read at all: it comes back as one outcome saying why (so nothing of it is loaded, rather
    than some of its lines). An object that is a JSON document, not NDJSON, is read whole by one
    task (its records span lines)."""
    counted = [i for i in items if i.ranged and i.end is not None]
    counts = {(c.item, c.start): c for c in run(count_lines, counted)} if counted else {}
    documents = {c.item for c in counts.values() if c.document}
    if documents:
        whole = {i.item: replace(i, start=0, end=None, first_line=1) for i in items if i.item in documents}
        items = [i for i in items if i.item not in documents] + list(whole.values())
    first: dict[tuple[int, int], int] = {}
    spoiled: dict[int, tuple[FileTask, RangeLines]] = {}
    ranges = sorted((i for i in items if i.ranged), key=lambda i: (i.item, i.start))
    for obj, group in groupby(ranges, key=lambda i: i.item):
        items_of = list(group)
        line = items_of[0].first_line  # 1, or where a tail goes on (the first range's, as planned)
        for item in items_of:
            first[obj, item.start] = line
            if item.end is None:  # the last range
                break
            count = counts[obj, item.start]
            if count.status != "ok":
                spoiled.setdefault(obj, (item, count))
            line += count.lines
    numbered = [
        replace(i, first_line=first[i.item, i.start]) if i.ranged else i for i in items if i.item not in spoiled
    ]
    problems = [FileOutcome(i.read_uri, c.status, reason=c.reason, item=i.item) for i, c in spoiled.values()]
    return numbered, problems


def object_outcomes(outcomes: Iterable[FileOutcome]) -> tuple[list[FileOutcome], list[FileOutcome]]:
    """One outcome per object from its ranges' (an object read whole has one already), and the
    ranges that could not be read of objects whose other ranges loaded (each becomes a quarantine
    record naming its bytes). Bad lines and text bytes count every range's, as their quarantine
    records were written whatever happened to the range later."""
    merged: list[FileOutcome] = []
    lost: list[FileOutcome] = []
    for _, group in groupby(sorted(outcomes, key=lambda o: (o.item, o.start)), key=lambda o: o.item):
        parts = list(group)
        if len(parts) == 1 and parts[0].start == 0 and parts[0].end is None:
            merged.append(parts[0])
            continue
        read = [p for p in parts if p.status not in _PROBLEMS]
        failed = [p for p in parts if p.status in _PROBLEMS]
        good = sum(p.good for p in read)
        bad = sum(p.bad for p in parts)
        text_bytes = sum(p.text_bytes for p in parts)
        if (
            not good and failed and not any(p.violations for p in read)
        ):  # nothing loaded: the object is quarantined whole, as if read whole
            merged.append(replace(failed[0], start=0, end=None, bad=bad, text_bytes=text_bytes))
            continue
        keys: dict[str, None] = {}
        violations: dict[str, int] = {}
        for p in read:
            keys.update(dict.fromkeys(p.new_keys))
            for rule, n in p.violations:
                violations[rule] = violations.get(rule, 0) + n
        merged.append(
            FileOutcome(
                parts[0].read_uri,
                "ingested" if good else "empty",
                good=good,
                bad=bad,
                text_bytes=text_bytes,
                new_keys=tuple(keys),
                reason=next((p.reason for p in read if p.reason), None),
                item=parts[0].item,
                violations=tuple(sorted(violations.items())),
                dropped=sum(p.dropped for p in read),
            )
        )
        lost.extend(
            replace(p, reason=f"{p.reason or p.status}; {byte_range(p.start, p.end)} not loaded") for p in failed
        )
    return merged, lost
