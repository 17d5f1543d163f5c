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
their copy sorted by partition (the other half; see :mod:`glue_processor.write.shared`).
``bench/memory.py`` measures the worst shapes (many known columns x empty rows, one huge line, many
tiny lines, a new key per line) against it.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import pyarrow as pa

from glue_processor.defaults import DEFAULT_MAX_COLUMNS
from glue_processor.read.expect import Checked, check
from glue_processor.read.extra import EXTRA, EXTRA_TYPE
from glue_processor.read.names import LINEAGE_COLUMNS, TIMESTAMP, column_names
from glue_processor.read.ndjson import MAX_CELLS, RAW_BYTES, STRING, BadLine, ParsedText, parse_pieces
from glue_processor.read.objects import ObjectMissing, ObjectStore, VersionGone, store_for
from glue_processor.read.text import (
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
    read_from,
)
from glue_processor.table.declared import RESCUED, RESCUED_TYPE, DeclaredSchema, column_type, conform
from glue_processor.table.partitioning import PartitionPlan
from glue_processor.table.rules import Rules
from glue_processor.write import parquet as parquet_writer
from glue_processor.write.shared import SHARED_ROW_GROUP_BYTES, sort_spill

if TYPE_CHECKING:
    from glue_processor.table.datafiles import FileStats

logger = logging.getLogger(__name__)

REASON_MISSING = "object not found (deleted or never written)"
REASON_UNREADABLE = "object could not be read or decompressed (corrupt or truncated)"
REASON_CUT = "object is not a whole JSON document"
REASON_LONG_LINE = "line longer than max_line_mb; skipped"
REASON_UNPARSEABLE = "object could not be parsed"
REASON_SUPERSEDED = "object overwritten after its event (a newer eTag)"
REASON_VERSION_GONE = (
    "the event's version was overwritten before it was read (unversioned bucket); the newer version's own event "
    "loads that one"
)
# Clock slack between S3's Last-Modified and the event time of the same write.
OVERWRITE_TOLERANCE_S = 2.0
_DATA = "k/"  # prefix of data columns inside a task, apart from the lineage columns


@dataclass(frozen=True)
class FileTask:
    read_uri: str
    source_uri: str
    etag: str
    event_time: datetime
    manifest_uri: str
    version_id: str | None = None
    item: int = 0  # the object's place in the batch (two versions of one key share a URI)
    # a large plain object is read by several tasks: the lines that start in bytes [start, end),
    # numbered from first_line (see glue_processor/plan/ranges.py); end None: to the end of the object
    start: int = 0
    end: int | None = None
    first_line: int = 1

    @property
    def ranged(self) -> bool:
        """One of several byte ranges of its object (not the whole of it)."""
        return self.start > 0 or self.end is not None


@dataclass(frozen=True)
class TaskSpec:
    index: int
    files: tuple[FileTask, ...]
    known: tuple[str, ...]
    data_dir: str
    quarantine_dir: str
    batch_id: int
    ingest_time: datetime
    target_bytes: int
    # Arrow bytes per Parquet row group; also the step in which a file grows toward the target.
    row_group_bytes: int = 32 * 1024 * 1024
    # Row groups a file is written in at least (a file stops within half a row group of the target).
    row_groups_per_file: int = 4
    max_open_files: int = 64  # partition files a task keeps open at once (see _ParquetFiles._write)
    # How an object is read: chunks of whole lines, the longest line, the most text (see reading.py).
    limits: Limits = field(default_factory=Limits)
    # Declared column types (--schema): converted here, what does not convert goes to _rescued.
    declared: DeclaredSchema | None = None
    # The table's rules (glue_processor/table/rules.py), checked here on the typed rows.
    rules: Rules | None = None
    # Partitions from the record: each row's partition, so each file holds one (None: one partition).
    partitions: PartitionPlan | None = None
    # The most partitions whose rows the task keeps apart; any other's join the null partition here
    # (see _ParquetFiles._within_limit), so what a task reports is bounded whatever its input.
    partition_limit: int | None = None
    # The most data columns (known keys included); values of keys past it go to the _extra map.
    max_columns: int = DEFAULT_MAX_COLUMNS
    # Keys of the table's shares set aside, not known yet: a column only where a row has that very
    # key, and no other case of one is (see Memory.held_keys).
    held: tuple[str, ...] = ()

    @functools.cached_property
    def _names(self) -> list[tuple[str, str]]:
        """The columns of the table's keys and of those held for its shares set aside."""
        return column_names((*self.known, *self.held))

    @functools.cached_property
    def taken(self) -> frozenset[str]:
        """The table's keys (and those held for its shares set aside), the names of their columns and
        of its time partitions, lower-cased: a new key that is another case of either goes to _extra
        (``KIND__2`` next to a known ``kind`` named ``kind__2`` would rename it too)."""
        return (
            frozenset(k.lower() for k in (*self.known, *self.held))
            | {name.lower() for _, name in self._names}
            | {name.lower() for name in self.partition_names}
        )

    @property
    def partition_names(self) -> tuple[str, ...]:
        """The names of the table's time partition fields (``ingest_day``, ``ts_day``): Iceberg lets
        no column share one, so a key of such a name goes to _extra."""
        fields = self.partitions.fields if self.partitions is not None else ()
        return tuple(f.name for f in fields if f.transform != "identity")

    @functools.cached_property
    def exact(self) -> frozenset[str]:
        """The held keys a row may still make columns: those whose column is named as the key (a
        held ``kind`` named ``kind__2``, next to a held ``Kind``, would be named ``kind`` here)."""
        held = set(self.held)
        return frozenset(k for k, name in self._names if k in held and name == k)


@dataclass(frozen=True)
class FileOutcome:
    read_uri: str
    status: str
    good: int = 0
    bad: int = 0
    text_bytes: int = 0
    new_keys: tuple[str, ...] = ()
    reason: str | None = None
    start: int = 0  # the byte range read (FileTask.start/end)
    end: int | None = None
    item: int = 0  # FileTask.item
    violations: tuple[tuple[str, int], ...] = ()  # rows that broke each rule (of those that some did)
    dropped: int = 0  # rows a drop rule removed


@dataclass(frozen=True)
class SharedRows:
    """One partition's rows in a task's shared file (see :mod:`glue_processor.write.shared`)."""

    first: int  # the first row, counted from the start of the file
    rows: int
    file_bytes: int  # the size of the whole shared file (a ranged reader needs it)


@dataclass(frozen=True)
class Staged:
    uri: str
    bytes: int  # of a shared range: its share of the shared file's bytes, by rows
    keys: tuple[str, ...] = ()
    # the Parquet footer of an output file, for the table's statistics (no read-back on the driver)
    footer: builtins.bytes = field(default=b"", repr=False)
    partition: str = ""  # the partition path of its rows ("" when the sink does not partition by row)
    folded: int = 0  # values the write stage moved to _extra (keys past the batch's column bound)
    shared: SharedRows | None = None  # a range of rows of a shared file, not a file of its own
    # rows of a partition past the batch's partition limit, relabelled to the null partition: the write
    # stage moves their partition values to _extra (glue_processor.plan.overflow)
    overflow: bool = False
    demoted: int = 0  # of an output file: rows the write stage moved so into the null partition
    # an output file's table statistics, worked out by the write task that wrote it (Iceberg tables)
    stats: FileStats | None = field(default=None, repr=False)


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


def overwritten(modified_epoch_s: float, event_time: datetime) -> bool:
    """True when the object was last modified after the event that listed it (clock slack allowed)."""
    return modified_epoch_s - event_time.timestamp() > OVERWRITE_TOLERANCE_S


def run_task(spec: TaskSpec, stores: Callable[[str], ObjectStore] = store_for) -> TaskResult:
    """Read, parse and stage one group of objects."""
    keys = list(spec.known)
    outcomes: list[FileOutcome] = []
    quarantine = _QuarantineFile(f"{spec.quarantine_dir}/quarantine-{spec.index:05d}.json", stores)
    with _ParquetFiles(spec, stores) as out, quarantine:
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
    out: _ParquetFiles,
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


class NotReadable(Exception):
    """The version an event named cannot be read: ``status`` is missing or superseded."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@contextlib.contextmanager
def event_version(
    item: FileTask, stores: Callable[[str], ObjectStore], *, length: int | None = None
) -> Iterator[BinaryIO]:
    """The bytes of the object version ``item``'s event named, from where its range's reader starts
    (``length`` of them at most); :class:`NotReadable` when it is gone or was overwritten."""
    try:
        with stores(item.read_uri).open(
            item.read_uri, version_id=item.version_id, etag=item.etag, start=read_from(item.start), length=length
        ) as body:
            if not body.exact and overwritten(body.modified_epoch_s, item.event_time):
                # A newer version replaced the object after this event; that version's own event
                # brings it. Loading it here under this event's eTag would ingest it twice.
                raise NotReadable("superseded", REASON_SUPERSEDED)
            yield body.stream
    except ObjectMissing as exc:
        raise NotReadable("missing", REASON_MISSING if item.version_id is None else f"{REASON_MISSING}: {exc}") from exc
    except VersionGone as exc:
        raise NotReadable("superseded", REASON_VERSION_GONE) from exc


def byte_range(start: int, end: int | None) -> str:
    """How a quarantine record names one of the byte ranges an object was read in."""
    return f"bytes {start}-{'' if end is None else end} of the object (one of the ranges it was read in)"


def _parse_stream(
    item: FileTask, text: Any, keys: list[str], *, spec: TaskSpec, out: _ParquetFiles, bad_records: _QuarantineFile
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
                        checked = check(rows, spec.rules, data_prefix=_DATA)
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


def _typed(rows: pa.Table, spec: TaskSpec) -> pa.Table:
    """The declared columns of ``rows`` converted, and ``_rescued`` holding what did not: done per
    piece, before the rules, so a rule sees typed values."""
    if spec.declared is None:
        return rows
    present = [k for k in spec.declared.keys if f"{_DATA}{k}" in rows.column_names]
    if not present:  # none of the declared keys in these rows: nothing to convert, nothing rescued
        return rows.append_column(RESCUED, pa.nulls(len(rows), RESCUED_TYPE))
    typed, rescued, _ = conform({k: rows.column(f"{_DATA}{k}") for k in present}, spec.declared)
    for k in present:
        rows = rows.set_column(rows.schema.get_field_index(f"{_DATA}{k}"), f"{_DATA}{k}", typed[k])
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

    columns = {f"{_DATA}{k}": c for k, c in zip(parsed.keys, parsed.columns, strict=True)}
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


def _output_table(
    data: dict[str, Any], keys: tuple[str, ...], lineage: dict[str, Any], rescued: Any = None, extra: Any = None
) -> pa.Table:
    """Data columns named and ordered by :func:`column_names`, then the lineage columns, ``_extra``,
    and ``_rescued`` when columns are declared."""
    mapping = column_names(keys)
    names = [name for _, name in mapping] + list(LINEAGE_COLUMNS) + [EXTRA]
    rows = len(lineage["_line"])
    arrays = [data[key] for key, _ in mapping] + [lineage[c] for c in LINEAGE_COLUMNS]
    arrays.append(extra if extra is not None else pa.nulls(rows, EXTRA_TYPE))
    if rescued is not None:
        names.append(RESCUED)
        arrays.append(rescued)
    return pa.table(arrays, names=names)


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


def _weight(table: pa.Table) -> int:
    """What a table's rows weigh in a Parquet file, about: the bytes of its string values, and the
    Arrow bytes of other columns, a dictionary's indices only (an object's lineage strings, one value
    each, weigh next to nothing in the file either; and a slice keeps its source's whole dictionary).
    Not ``nbytes``, which counts the offsets of every NULL: with many sparse columns that is most of
    it, and row groups would come out a fraction of their size."""
    total = 0
    for column in table.columns:
        if column.null_count == len(column):
            continue
        if pa.types.is_dictionary(column.type):
            total += len(column) * column.type.index_type.bit_width // 8
            continue
        wide = pa.types.is_large_string(column.type)
        if not (wide or pa.types.is_string(column.type)):
            total += column.nbytes
            continue
        for chunk in column.chunks:  # the span of its offsets: O(1), no pass over the values
            offsets = chunk.buffers()[1]
            if offsets is None or not len(chunk):
                continue
            ends = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32)
            total += int(ends[chunk.offset + len(chunk)] - ends[chunk.offset])
    return total


def _one_dictionary(table: pa.Table) -> pa.Table:
    """``table`` (a row group's rows) with each dictionary column on one dictionary of the values its
    rows use. Used only: a slice or a take keeps its source's whole dictionary (a partitioned spill's
    take, every object of the spill), and Arrow's writer puts all of it in the row group's dictionary
    page (2,000 objects in 20 partitions: 10x the bytes). One: Arrow's
    writer encodes a chunk's indices as they are only while its dictionary equals the row group's
    first; a chunk of another object's would be decoded and hashed value by value (520,000 rows of
    four objects' ``_source_uri``: 20.9 ms as they came, 6.8 ms on one dictionary, 17.3 ms as plain
    strings)."""
    for i, column in enumerate(table.columns):
        if pa.types.is_dictionary(column.type) and any(len(c.dictionary) > 1 for c in column.chunks):
            chunks = [_used_only(c) for c in column.chunks]
            table = table.set_column(i, table.field(i), pa.chunked_array(chunks, column.type))
    return table.unify_dictionaries()


def _used_only(chunk: pa.DictionaryArray) -> pa.DictionaryArray:
    """``chunk`` with the dictionary values its rows use, in their order: one pass over the indices."""
    if len(chunk.dictionary) <= 1:
        return chunk
    nulls = chunk.indices.is_null().to_numpy(zero_copy_only=False) if chunk.null_count else None
    indices = chunk.indices.fill_null(0).to_numpy(zero_copy_only=False)
    seen = np.zeros(len(chunk.dictionary), dtype=bool)
    seen[indices] = True
    if seen.all():
        return chunk
    remap = np.cumsum(seen, dtype=np.int32) - 1
    return pa.DictionaryArray.from_arrays(
        pa.array(remap[indices], mask=nulls), chunk.dictionary.take(pa.array(np.flatnonzero(seen)))
    )


@dataclass
class _OpenFile:
    """A Parquet file being written: one partition, one key set."""

    uri: str
    keys: tuple[str, ...]
    file: contextlib.ExitStack
    path: Path
    writer: Any
    arrow_bytes: int = 0
    full: bool = False  # about the target: the next rows start a new file

    def finish(self) -> int:
        """Close the writer and put the file in place; its size."""
        self.writer.close()
        size = self.path.stat().st_size
        self.file.close()
        return size


def _rows_per_group(table: pa.Table, weight: int, group_weight: int, columns: int) -> int:
    """Rows of ``table`` (weighing ``weight``) in a row group of about ``group_weight``, at most
    ``MAX_CELLS`` cells of ``columns`` columns."""
    return max(1, min(len(table) * group_weight // max(1, weight), MAX_CELLS // max(1, columns)))


# The most a task holds (by weight, see _weight) of partitions' rows not yet written: rows wait in
# runs of at most half of it, then a spill sorts them (one copy, the other half).
HELD_BYTES = 128 * 1024 * 1024


@dataclass
class _SharedFile:
    """A task's one file for the rows of its small partitions (:mod:`glue_processor.write.shared`)."""

    out: _OpenFile
    rows: int = 0
    ranges: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass
class _ParquetFiles:
    """Row groups of ~``row_group_bytes`` into files of ~``target_bytes``; a new key set starts
    a new file (a Parquet file has one schema), and so does each partition (a file holds one)."""

    spec: TaskSpec
    stores: Callable[[str], ObjectStore]
    staged: list[Staged] = field(default_factory=list)
    _pending: list[pa.Table] = field(default_factory=list)
    _pending_keys: tuple[str, ...] = ()
    _pending_weight: int = 0
    _pending_cells: int = 0  # rows x columns held (each an offset at least, whatever its weight)
    _open: dict[str, _OpenFile] = field(default_factory=dict)
    # rows of a partitioned table waiting for a spill (each a table and its rows' partitions)
    _runs: list[tuple[pa.Table, pa.DictionaryArray]] = field(default_factory=list)
    _runs_keys: tuple[str, ...] = ()
    _runs_weight: int = 0
    _runs_cells: int = 0
    _shared: _SharedFile | None = None
    rescued: int = 0
    null_partitions: int = 0
    extra_values: int = 0
    overflow_records: int = 0
    rules_s: float = 0.0
    _kept: set[str] = field(default_factory=set)  # the partitions whose rows the task keeps apart

    def __enter__(self) -> _ParquetFiles:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self._flush(final=True)
            for label in list(self._open):
                self._close(label)
            self._close_shared()
        else:
            # The task failed: the files being written are discarded, never put in place.
            for open_file in self._open.values():
                open_file.file.__exit__(exc_type, exc, tb)
            if self._shared is not None:
                self._shared.out.file.__exit__(exc_type, exc, tb)

    def add(self, table: pa.Table, keys: tuple[str, ...]) -> None:
        """Rows to write; a row group is written when they weigh a step, or hold MAX_CELLS cells."""
        weight = _weight(table)
        width = max(len(keys), table.num_columns)
        rows = _rows_per_group(table, weight, self._step, width)
        for offset in range(0, len(table), rows):
            piece = table.slice(offset, rows)
            self._pending.append(piece)
            self._pending_weight += weight * len(piece) // max(1, len(table))
            self._pending_cells += len(piece) * width
            self._pending_keys = keys
            if self._pending_weight >= self._step or self._pending_cells >= MAX_CELLS:
                self._flush()

    @property
    def _step(self) -> int:
        """Weight (see :func:`_weight`) per row group: by default at most a quarter of the target, so a
        file stops close to it."""
        return min(self.spec.row_group_bytes, max(1, self.spec.target_bytes // self.spec.row_groups_per_file))

    def _flush(self, *, final: bool = False) -> None:
        if self._pending:
            self._write_pending(final=final)
        if final:  # the rows waiting for a spill go too, whether or not rows were pending
            self._spill(final=True)

    def _write_pending(self, *, final: bool) -> None:
        keys = self._pending_keys
        merged = pa.concat_tables(self._pending, promote_options="default")
        self._pending = []
        self._pending_weight = 0
        self._pending_cells = 0
        present = set(merged.column_names)
        declared = self.spec.declared
        data = {
            k: merged.column(f"{_DATA}{k}")
            if f"{_DATA}{k}" in present
            else pa.nulls(len(merged), column_type(k, declared))
            for k in keys
        }
        # declared columns were converted per piece (_typed), before the rules
        rescued = merged.column(RESCUED) if declared is not None else None
        lineage = {c: merged.column(c) for c in LINEAGE_COLUMNS}
        table = _output_table(data, keys, lineage, rescued, merged.column(EXTRA))
        if self.spec.partitions is None:
            self._write("", table, keys, final=final)
            return
        table, moved = self.spec.partitions.bound_values(table)  # their rows: null partitions, counted below
        self.extra_values += moved
        labels, nulls = self.spec.partitions.labels(table)
        self.null_partitions += nulls
        if self.spec.partition_limit is not None:
            table, labels = self._within_limit(table, labels, self.spec.partitions, self.spec.partition_limit)
        self._keep(table, labels, keys)

    def _within_limit(
        self, table: pa.Table, labels: pa.DictionaryArray, plan: PartitionPlan, limit: int
    ) -> tuple[pa.Table, pa.DictionaryArray]:
        """``table``'s rows, those of partitions past the task's ``limit`` moved to the null
        partition (their values to ``_extra``): the task keeps apart the first ``limit`` partitions
        it meets (the null one among them; within a chunk, the largest first), so it reports, and
        the driver holds, ranges of at most ``limit`` partitions a spill whatever the input (one
        object of a value per row would otherwise be a range per row). The batch then keeps the
        ``limit`` largest of what its tasks kept (:mod:`glue_processor.plan.overflow`)."""
        null = plan.null_label
        self._kept.add(null)
        names = labels.dictionary.to_pylist()
        codes = labels.indices.to_numpy(zero_copy_only=False)
        counts = np.bincount(codes, minlength=len(names))
        fresh = sorted(
            (i for i, name in enumerate(names) if counts[i] and name not in self._kept),
            key=lambda i: (-counts[i], names[i]),
        )
        room = max(0, limit - len(self._kept))
        self._kept.update(names[i] for i in fresh[:room])
        if len(fresh) <= room:
            return table, labels
        moving = np.zeros(len(names), dtype=bool)
        moving[fresh[room:]] = True
        rows = moving[codes]
        self.overflow_records += int(rows.sum())
        # the labels again: the rows kept keep theirs (a dictionary without the moved ones), the
        # moved ones are the null partition's
        stay = [i for i in range(len(names)) if not moving[i]]
        dictionary = [names[i] for i in stay] + ([] if null in names else [null])
        remap = np.full(len(names), dictionary.index(null), dtype=np.int32)
        remap[stay] = np.arange(len(stay), dtype=np.int32)
        relabelled = pa.DictionaryArray.from_arrays(pa.array(remap[codes]), pa.array(dictionary, pa.string()))
        return plan.demote(table, pa.array(rows)), relabelled

    def _keep(self, table: pa.Table, labels: pa.DictionaryArray, keys: tuple[str, ...]) -> None:
        """Rows of a partitioned table wait, as they came, for a spill that sorts them by partition
        once (a take per partition per piece would cost each partition ~0.5 ms a piece). A spill
        comes when they weigh half of ``HELD_BYTES`` or hold half of ``MAX_CELLS`` cells (its sorted
        copy is the other half), when the key set changes (a file has one), and at the end."""
        if self._runs and self._runs_keys != keys:
            self._spill()
        self._runs.append((table, labels))
        self._runs_keys = keys
        self._runs_weight += _weight(table)
        self._runs_cells += len(table) * table.num_columns
        if self._runs_weight >= HELD_BYTES // 2 or self._runs_cells >= MAX_CELLS // 2:
            self._spill()

    def _spill(self, *, final: bool = False) -> None:
        """The waiting rows sorted by partition: a partition with enough rows is written to its own
        part, in row groups of about the step; the small ones to the task's shared file."""
        if not self._runs:
            return
        tables, labels = zip(*self._runs, strict=True)
        keys, weight = self._runs_keys, self._runs_weight
        self._runs, self._runs_weight, self._runs_cells = [], 0, 0
        spill = sort_spill(tables, labels, weight=weight)
        del tables, labels
        if spill.shared:
            self._share(spill.table.slice(0, spill.shared_rows), spill.shared, keys)
        # rows per row group of about the step, by the spill's mean row
        step = _rows_per_group(spill.table, weight, self._step, spill.table.num_columns)
        for label, first, count in spill.own:
            for offset in range(first, first + count, step):
                self._write(label, spill.table.slice(offset, min(step, first + count - offset)), keys, final=final)

    def _share(self, table: pa.Table, ranges: list[tuple[str, int, int]], keys: tuple[str, ...]) -> None:
        """Small partitions' rows (sorted by partition) to the end of the task's shared file."""
        if self._shared is not None and self._shared.out.keys != keys:
            self._close_shared()  # a file has one key set
        if self._shared is None:
            self._shared = _SharedFile(self._open_file("shared", table, keys))
        rows = _rows_per_group(table, _weight(table), SHARED_ROW_GROUP_BYTES, table.num_columns)
        for offset in range(0, len(table), rows):  # a row group a call: each with its own dictionary
            self._shared.out.writer.write_table(_one_dictionary(table.slice(offset, rows)), row_group_size=rows)
        self._shared.ranges.extend((label, self._shared.rows + first, count) for label, first, count in ranges)
        self._shared.rows += len(table)

    def _close_shared(self) -> None:
        shared, self._shared = self._shared, None
        if shared is None:
            return
        size = shared.out.finish()
        for label, first, count in shared.ranges:
            self.staged.append(
                Staged(
                    shared.out.uri,
                    max(1, size * count // max(1, shared.rows)),
                    shared.out.keys,
                    partition=label,
                    shared=SharedRows(first, count, size),
                )
            )

    def _write(self, label: str, table: pa.Table, keys: tuple[str, ...], *, final: bool = False) -> None:
        """A row group into the partition's open file; a full file is closed when more rows come,
        except a small last remainder, which joins it (rather than making a part of its own, whose
        footer and scheduling would cost as much as a full one's)."""
        table = _one_dictionary(table)
        weight = _weight(table)
        current = self._open.get(label)
        tail = final and weight < self._step / 2
        if current is not None and (current.keys != keys or (current.full and not tail)):
            self._close(label)
            current = None
        if current is None:
            if len(self._open) >= self.spec.max_open_files:
                # a bound on what a task holds open (descriptors, writers' buffers), however many
                # partitions its rows span: the least recently written file is finished; its
                # partition's later rows start another part, which the write stage merges
                self._close(next(iter(self._open)))
            current = self._open[label] = self._open_file("part", table, keys)
        else:
            self._open[label] = self._open.pop(label)  # most recently written last
        current.writer.write_table(table, row_group_size=max(1, len(table)))
        current.arrow_bytes += weight
        written = current.path.stat().st_size
        next_group = self._step * written / max(1, current.arrow_bytes)
        current.full = written + next_group / 2 >= self.spec.target_bytes

    def _open_file(self, kind: str, first: pa.Table, keys: tuple[str, ...]) -> _OpenFile:
        """A new ``part`` (one partition) or ``shared`` file of the task, for tables like ``first``."""
        n = len(self.staged) + len(self._open)
        uri = f"{self.spec.data_dir}/{kind}-{self.spec.index:05d}-{n:03d}.parquet"
        stack = contextlib.ExitStack()
        path = stack.enter_context(self.stores(uri).writer(uri))
        return _OpenFile(uri, keys, stack, path, parquet_writer.writer(path, first))

    def _close(self, label: str) -> None:
        current = self._open.pop(label, None)
        if current is None:
            return
        size = current.finish()
        self.staged.append(Staged(current.uri, size, current.keys, partition=label))


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
