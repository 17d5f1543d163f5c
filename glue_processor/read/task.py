"""One parse task of a batch: read a group of objects, parse them, stage Parquet parts.

The driver splits a batch's objects into groups by input, so every core has work
(:func:`glue_processor.plan.sizing.parse_unit_count`); each group is one task. A task streams its
objects (gzip by the ``.gz`` suffix), or byte ranges of large plain ones
(:mod:`glue_processor.plan.ranges`), parses them with :func:`glue_processor.read.ndjson.parse_ndjson`,
and stages its rows as Parquet parts of at most about the target size, and its bad lines as JSON
quarantine records. It returns what it found per object and what it staged; the write stage
(:mod:`glue_processor.write.merge`) makes the batch's files from the parts, and the driver commits
exactly those, so a retried task's leftovers are never published.

Memory: a task holds at most :func:`memory_bound` bytes, whatever the shape of its input. The text
is read a block at a time (two read ahead) in chunks of whole lines (``Limits.chunk_bytes``, or one
line up to ``Limits.max_line_bytes``, held at most :data:`LINE_COPIES` times over); a chunk is parsed in pieces of
at most ``MAX_CELLS`` cells (rows x columns, each an offset and a validity bit: :data:`CELL_BYTES`),
and rows wait to be written until they weigh a row group or hold ``MAX_CELLS`` cells, so at most
about four pieces' cells are held at once (the piece being parsed, those waiting, the row group
being written); plus the Parquet writer's buffers, and, when a table is partitioned from the
record, the rows waiting for a spill (at most half of ``HELD_BYTES`` and of ``MAX_CELLS`` cells) and
their copy sorted by partition (the other half; see :mod:`glue_processor.shared.spill`).
``bench/memory.py`` measures the worst shapes (many known columns x empty rows, one huge line, many
tiny lines, a new key per line) against it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa

from glue_processor.read.expect import Checked, check
from glue_processor.read.ndjson import MAX_CELLS, RAW_BYTES, BadLine, ParsedText, parse_pieces
from glue_processor.read.parts import DATA, HELD_BYTES, ParquetParts, Staged
from glue_processor.shared.declared import RESCUED, RESCUED_TYPE, conform
from glue_processor.shared.extra import EXTRA, EXTRA_TYPE
from glue_processor.shared.names import STRING, TIMESTAMP
from glue_processor.shared.objects import ObjectStore, store_for
from glue_processor.shared.spec import FileOutcome, FileTask, TaskSpec
from glue_processor.shared.text import (
    MIB,
    READ_BYTES,
    Chunk,
    DocumentCut,
    Limits,
    LongLine,
    OwnedLines,
    ReadFailed,
    StreamStopped,
    TooLarge,
    chunks,
    decompressed,
)
from glue_processor.shared.version import (
    REASON_UNREADABLE,
    NotReadable,
    byte_range,
    event_version,
)

logger = logging.getLogger(__name__)

REASON_CUT = "object is not a whole JSON document"
REASON_LONG_LINE = "line longer than max_line_mb; skipped"
REASON_UNPARSEABLE = "object could not be parsed"


@dataclass(frozen=True)
class TaskResult:
    index: int
    files: tuple[FileOutcome, ...]
    data: tuple[Staged, ...]
    quarantine: tuple[Staged, ...]
    rescued: int = 0  # values of declared columns that did not convert (kept in _rescued)
    null_partitions: int = 0  # rows whose partition value was missing (in the null partition)
    extra_values: int = 0  # values kept in _extra: keys past max_columns or no column (see ndjson.parse_ndjson)
    overflow_records: int = 0  # rows moved to the null partition past the partition limit
    rules_s: float = 0.0  # seconds the task spent checking rows against the table's rules
    # (key, values) of each key the table does not know that has values in the task's rows: of new
    # keys that differ only in case, the one with more values across the batch keeps the column
    # (outcome.case_losers); a task's total, not its objects' (every object of a table's first
    # batch has its keys new: per object, 100k objects x 250 keys would be 25M pairs to the driver)
    new_key_values: tuple[tuple[str, int], ...] = ()


def run_task(spec: TaskSpec, stores: Callable[[str], ObjectStore] = store_for) -> TaskResult:
    """Read, parse and stage one group of objects."""
    keys = list(spec.known)
    outcomes: list[FileOutcome] = []
    quarantine = _QuarantineFile(f"{spec.quarantine_dir}/quarantine-{spec.index:05d}.json", stores)
    with ParquetParts(spec, stores) as out, quarantine:
        for item in spec.files:
            found = _load_one(item, keys, stores, spec=spec, out=out, bad_records=quarantine)
            outcomes.append(dataclasses.replace(found, item=item.item, start=item.start, end=item.end))
    return TaskResult(
        spec.index,
        tuple(outcomes),
        tuple(out.staged),
        tuple(quarantine.staged),
        out.rescued,
        out.null_partitions,
        out.extra_values,
        out.overflow_records,
        out.rules_s,
        tuple(out.new_key_values.items()),
    )


# -- internals -------------------------------------------------------------------------------
class _QuarantineFile:
    """A task's quarantine records, written to its file as they come (an object with millions of
    bad lines must not hold them in memory), the file opened with the first record."""

    def __init__(self, uri: str, stores: Callable[[str], ObjectStore]) -> None:
        self.uri, self._stores = uri, stores
        self._stack = contextlib.ExitStack()
        self._file: Any = None
        self.staged: list[Staged] = []

    def append(self, record: dict[str, Any]) -> None:
        self.write(json.dumps(record, ensure_ascii=False) + "\n")

    def extend(self, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            self.append(record)

    def write(self, lines: str) -> None:
        """Records already written as JSON lines."""
        if not lines:
            return
        if self._file is None:
            path = self._stack.enter_context(self._stores(self.uri).writer(self.uri))
            self._file = self._stack.enter_context(path.open("w", encoding="utf-8"))
        self._file.write(lines)

    def __enter__(self) -> _QuarantineFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._file is None:
            return
        self._file.flush()
        size = self._file.buffer.tell()
        self._stack.__exit__(exc_type, exc, tb)  # a failed task's file is discarded, never put in place
        if exc_type is None:
            self.staged.append(Staged(self.uri, size))


def _load_one(
    item: FileTask,
    keys: list[str],
    stores: Callable[[str], ObjectStore],
    *,
    spec: TaskSpec,
    out: ParquetParts,
    bad_records: _QuarantineFile,
) -> FileOutcome:
    """Stream one object (or its range) through the parser into the task's Parquet files, chunk by
    chunk (memory bounded whatever its size); ``keys`` grows with the keys it finds."""
    try:
        with event_version(item, stores) as body:
            stream: Any = OwnedLines(body, start=item.start, end=item.end) if item.ranged else body
            text = decompressed(stream, gzipped=item.read_uri.lower().endswith(".gz"))
            return _parse_stream(item, text, keys, spec=spec, out=out, bad_records=bad_records)
    except NotReadable as exc:
        return FileOutcome(item.read_uri, exc.status, reason=exc.reason)


def _parse_stream(
    item: FileTask, text: Any, keys: list[str], *, spec: TaskSpec, out: ParquetParts, bad_records: _QuarantineFile
) -> FileOutcome:
    first_keys = set(keys)
    good = bad = text_bytes = dropped = 0
    violations: dict[str, int] = {}
    reason: str | None = None
    try:
        # a byte-order mark is skipped where an object starts (RFC 8259 section 8.1), nowhere else
        # a whole object may be a JSON document (an array, pretty-printed objects): read as records
        pieces = chunks(text, spec.limits, first_line=item.first_line, skip_bom=item.start == 0, sniff=not item.ranged)
        for piece in pieces:
            if isinstance(piece, LongLine):
                bad += 1
                bad_records.append(_long_line_record(item, piece, spec.batch_id))
                text_bytes += piece.size
                continue
            text_bytes += len(piece.text)
            # keys past the column bound never become columns: their values come back in parsed.extra
            for parsed, in_text in _parsed(piece, keys, spec):
                good += parsed.rows
                bad += len(parsed.bad)
                bad_records.extend(_quarantine_record(item, b, spec.batch_id) for b in parsed.bad)
                if parsed.rows:
                    out.extra_values += parsed.extra_values
                    rows = _typed(_with_lineage(parsed, item, spec), spec)
                    if spec.rules is not None:
                        began = time.perf_counter()
                        checked = check(rows, spec.rules, data_prefix=DATA)
                        rows = checked.kept
                        good -= checked.removed
                        bad += len(checked.rows)
                        dropped += checked.dropped
                        for rule, n in checked.violations.items():
                            violations[rule] = violations.get(rule, 0) + n
                        bad_records.write(
                            _rule_lines(
                                item, piece, checked, lines=parsed.lines, in_text=in_text, batch_id=spec.batch_id
                            )
                        )
                        out.rules_s += time.perf_counter() - began
                    if RESCUED in rows.column_names:  # the values the rows kept did not convert
                        out.rescued += _entries(rows.column(RESCUED))
                    # keys new to the table come last: their values in the rows the rules kept
                    _count_values(rows, parsed.keys[len(spec.known) :], out.new_key_values)
                    if len(rows):
                        out.add(rows, tuple(keys))
    except StreamStopped as exc:
        what = REASON_UNREADABLE if isinstance(exc, ReadFailed) else "object too large"
        if isinstance(exc, TooLarge):
            what = f"object over max_object_mb ({spec.limits.max_object_bytes // (1024 * 1024)} MiB of text)"
        reason = f"{what}: {exc}; lines from {exc.next_line} on were not loaded"
        if isinstance(exc, DocumentCut):  # every line was read: the document itself is not whole
            reason = f"{REASON_CUT}: {exc}"
        if item.ranged:
            reason += f" (to the end of {byte_range(item.start, item.end)})"
        if not good and not violations:  # nothing loaded: the driver quarantines the object whole, with this reason
            return FileOutcome(item.read_uri, "unreadable", bad=bad, text_bytes=exc.text_bytes, reason=reason)
        # some lines loaded: the record says exactly from which line on the rest was not
        bad_records.append(_stopped_record(item, reason, spec.batch_id))
    except _ParseFailed as exc:  # parsing is pure: a failure belongs to this object, which is quarantined
        logger.exception("object could not be parsed", extra={"uri": item.read_uri})
        reason = f"{REASON_UNPARSEABLE}: {type(exc.__cause__).__name__}: {exc.__cause__}"[:1000]
        if not good and not violations:
            return FileOutcome(item.read_uri, "unreadable", reason=reason)
        bad_records.append(_stopped_record(item, reason, spec.batch_id))
    status = "ingested" if good else "empty"
    new_keys = tuple(k for k in keys if k not in first_keys)
    return FileOutcome(
        item.read_uri,
        status,
        good,
        bad,
        text_bytes,
        new_keys,
        reason,
        violations=tuple(sorted(violations.items())),
        dropped=dropped,
    )


class _ParseFailed(Exception):
    """The parser itself failed on a chunk (any error, out of memory included)."""


def _parsed(piece: Chunk, keys: list[str], spec: TaskSpec) -> Iterator[tuple[ParsedText, pa.Array]]:
    """The chunk's rows, in pieces of at most MAX_CELLS cells (rows x columns: the bound on a
    piece's memory whatever the shape), each with the numbers of its rows' lines in the chunk's text
    (a JSON document's records: one a line there, numbered by the object's lines in the piece);
    ``keys`` grows with the columns they admit."""
    pieces: Iterator[ParsedText] | None = None
    while True:
        try:
            if pieces is None:
                pieces = parse_pieces(
                    piece.text,
                    keys,
                    max_columns=spec.max_columns,
                    first_line=piece.first_line,
                    taken=spec.taken,
                    exact=spec.exact,
                )
            parsed = next(pieces, None)
        except Exception as exc:
            raise _ParseFailed(str(exc)) from exc
        if parsed is None:
            return
        yield (parsed if piece.starts is None else _renumbered(parsed, piece.starts)), parsed.lines


def _renumbered(parsed: ParsedText, starts: np.ndarray) -> ParsedText:
    """A JSON document's records (parsed as lines 1, 2, ...) numbered by the lines they start on."""
    lines = pa.array(starts[np.asarray(parsed.lines.to_numpy(zero_copy_only=False)) - 1], pa.int64())
    bad = [
        dataclasses.replace(b, line=int(starts[b.line - 1]), reason=b.reason.replace("line is", "record is"))
        for b in parsed.bad
    ]
    return dataclasses.replace(parsed, lines=lines, bad=bad)


def _long_line_record(item: FileTask, long: LongLine, batch_id: int) -> dict[str, Any]:
    raw = long.head.decode("utf-8", errors="replace")
    reason = f"{REASON_LONG_LINE} ({long.size} bytes; the first {len(long.head)} in raw)"
    return _quarantine_record(item, BadLine(long.line, reason, raw, long.size), batch_id)


def _stopped_record(item: FileTask, reason: str, batch_id: int) -> dict[str, Any]:
    return {
        "kind": "file",
        "source_uri": item.source_uri,
        "reason": reason,
        "manifest_uri": item.manifest_uri,
        "batch_id": batch_id,
        **_version(item),
    }


def _count_values(rows: pa.Table, keys: Sequence[str], into: dict[str, int]) -> None:
    """Add the values each of ``keys`` has in ``rows`` (its column ``DATA + key``) to ``into``."""
    if not keys:
        return
    names = set(rows.column_names)
    for key in keys:
        if f"{DATA}{key}" in names:
            column = rows.column(f"{DATA}{key}")
            if values := len(column) - column.null_count:
                into[key] = into.get(key, 0) + values


def _typed(rows: pa.Table, spec: TaskSpec) -> pa.Table:
    """The declared columns of ``rows`` converted, and ``_rescued`` holding what did not: done per
    piece, before the rules, so a rule sees typed values."""
    if spec.declared is None:
        return rows
    present = [k for k in spec.declared.keys if f"{DATA}{k}" in rows.column_names]
    if not present:  # none of the declared keys in these rows: nothing to convert, nothing rescued
        return rows.append_column(RESCUED, pa.nulls(len(rows), RESCUED_TYPE))
    typed, rescued, _ = conform({k: rows.column(f"{DATA}{k}") for k in present}, spec.declared)
    for k in present:
        rows = rows.set_column(rows.schema.get_field_index(f"{DATA}{k}"), f"{DATA}{k}", typed[k])
    return rows.append_column(RESCUED, rescued)


def _entries(maps: pa.ChunkedArray) -> int:
    """How many entries a map column's rows hold (a NULL row none): its offsets' span, no pass."""
    return sum(int(c.offsets[-1].as_py()) - int(c.offsets[0].as_py()) for c in maps.chunks if len(c))


def _rule_lines(
    item: FileTask, piece: Chunk, checked: Checked, *, lines: pa.Array, in_text: pa.Array, batch_id: int
) -> str:
    """The quarantine records of the rows ``checked`` quarantined, as JSON lines: one a row (its text
    once, however many rules it broke), naming the first quarantine rule it broke (as the table lists
    them) and why it broke each, with the row's line as the object has it (a JSON document's record
    as the chunk holds it, on one line). Built from pieces worded once per object and per kind of
    break, so a piece whose every row breaks a rule costs ~1 us a row, not a dict and a dump each."""
    if not len(checked.rows):
        return ""
    numbers = lines.to_numpy(zero_copy_only=False)[checked.rows]
    texts = _line_texts(piece, in_text.to_numpy(zero_copy_only=False)[checked.rows])
    same = {"kind": "rule", "source_uri": item.source_uri, "manifest_uri": item.manifest_uri, "batch_id": batch_id}
    head = json.dumps({**same, **_version(item)}, ensure_ascii=False)[:-1]  # the closing brace comes last
    why = {
        code: f', "rule": {json.dumps(rule)}, "reason": {json.dumps(reason, ensure_ascii=False)}'
        for code, rule, reason in checked.broken()
    }
    out = []
    for line, code, (raw, size) in zip(numbers.tolist(), checked.codes.tolist(), texts, strict=True):
        longer = f', "raw_bytes": {size}' if size > RAW_BYTES else ""
        out.append(f'{head}, "line": {line}{why[code]}, "raw": {_json_string(raw)}{longer}}}\n')
    return "".join(out)


_json_string = json.encoder.encode_basestring  # a str as JSON (C), as dumps writes it


def _line_texts(piece: Chunk, lines: np.ndarray) -> list[tuple[str, int]]:
    """The text of each of ``lines`` (numbers of the object's lines in ``piece``): its first
    RAW_BYTES, and its size in bytes (its line end and a CR before it left out)."""
    data = np.frombuffer(piece.text, dtype=np.uint8)
    ends = np.append(np.flatnonzero(data == 10), len(data))  # the last line may have no end
    i = lines.astype(np.int64) - piece.first_line
    starts = np.where(i == 0, 0, ends[np.maximum(i - 1, 0)] + 1)
    stops = ends[i]
    stops -= (stops > starts) & (data[np.maximum(stops - 1, 0)] == 13)
    cut = np.minimum(stops, starts + RAW_BYTES)
    view = memoryview(piece.text)
    return [
        (bytes(view[a:b]).decode("utf-8", errors="replace"), n)
        for a, b, n in zip(starts.tolist(), cut.tolist(), (stops - starts).tolist(), strict=True)
    ]


def _with_lineage(parsed: ParsedText, item: FileTask, spec: TaskSpec) -> pa.Table:
    """The parsed rows with their lineage and ``_extra``."""
    n = parsed.rows

    def constant(value: Any, type_: pa.DataType) -> pa.Array:
        # one value in every row, built from its buffers (a take of a one-value array gathers row by row)
        if pa.types.is_string(type_):
            # a string as a dictionary of one value: no copy of it a row, and Arrow's writer encodes
            # the indices as they are instead of hashing each row's value (the same column in the
            # file: a string, dictionary-encoded); names.decoded gives code that computes on it the
            # text. A None too, so the column's type never depends on its value.
            if value is None:
                return pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array([], type_))
            return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value], type_))
        if value is None:
            return pa.nulls(n, type_)
        return pa.repeat(pa.scalar(value, type_), n)

    columns = {f"{DATA}{k}": c for k, c in zip(parsed.keys, parsed.columns, strict=True)}
    columns.update(
        {
            "_source_uri": constant(item.source_uri, STRING),
            "_source_etag": constant(item.etag, STRING),
            "_line": parsed.lines,
            "_event_time": constant(item.event_time, TIMESTAMP),
            "_batch_id": constant(spec.batch_id, pa.int64()),
            "_ingest_time": constant(spec.ingest_time, TIMESTAMP),
            EXTRA: parsed.extra if parsed.extra is not None else pa.nulls(n, EXTRA_TYPE),
        }
    )
    return pa.table(columns)


def _version(item: FileTask) -> dict[str, Any]:
    """Which version of the object a record is about (two of one key can be in a batch)."""
    return {"etag": item.etag, **({"version_id": item.version_id} if item.version_id else {})}


def _quarantine_record(item: FileTask, bad: BadLine, batch_id: int) -> dict[str, Any]:
    return {
        "kind": "line",
        "source_uri": item.source_uri,
        "line": bad.line,
        "reason": bad.reason,
        "raw": bad.raw,
        **({"raw_bytes": bad.size} if bad.size else {}),  # raw is the first RAW_BYTES of that many
        "manifest_uri": item.manifest_uri,
        "batch_id": batch_id,
        **_version(item),
    }


# A cell (one row of one column) of a parsed piece: a 4-byte offset and a validity bit.
CELL_BYTES = 4.125


# What one line of a single value costs a task, in copies of it (11x measured, 64 to 250 MiB lines,
# bench/memory.py): its text read and carried (~3), parsed into a column (~1), and Arrow's Parquet
# statistics of the value (~6: computed whole for the page and the column chunk, min and max; pyarrow
# has no bound on their size, and without them the table would lose its bounds). A bad line costs
# ~1: it is never written, and its quarantine record keeps only its head (ndjson.RAW_BYTES).
LINE_COPIES = 12


def memory_bound(limits: Limits | None = None, *, longest_line: int = 0) -> int:
    """What one parse task holds at most, in bytes, above its process's start (see *Memory* in the
    module docstring): with the defaults and lines under a chunk, about 900 MiB (770 MiB when the
    table is not partitioned from the record: nothing is held)."""
    text = 2 * READ_BYTES + 4 * (limits or Limits()).chunk_bytes + LINE_COPIES * longest_line
    return int(text + 4 * CELL_BYTES * MAX_CELLS + 64 * MIB + HELD_BYTES + CELL_BYTES * MAX_CELLS)
