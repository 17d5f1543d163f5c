"""NDJSON bytes -> Arrow string columns, one per top-level key (pure: no I/O, no Spark).

This is the hot loop of the job. The bytes are scanned once by :mod:`ndjson_arrow` (native code,
no Python object per line or value), which validates every line and copies each value into its
key's column as the README's output semantics say: strings unescaped, numbers and booleans as
written, nested values as compact text, ``null`` as NULL. Here the column buffers only become
Arrow arrays, without copying them again.

A line is a row when it is one JSON object in valid UTF-8 and nothing else; anything else (bar
blank lines) becomes a :class:`BadLine` with its number and reason, whatever keys are known.
Keys past the column room (``room``), and keys that cannot be a column's name where the table lives
(:mod:`contracts.column_names`), never become columns: their values come back in ``extra``.

A scan holds at most ``max_cells`` cells (rows x columns): it stops at the line that would take it
past them and says how far it got (``consumed``, ``next_line``); :func:`parse_pieces` scans a text
to its end in as many pieces as that takes, so a chunk's memory is bounded by its rows x columns
whatever the shape (a million ``{}`` lines under a thousand known columns included).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import ndjson_arrow
import pyarrow as pa

from glue_processor.shared.extra import EXTRA_TYPE, to_map
from glue_processor.shared.names import STRING, nameable

if TYPE_CHECKING:
    from ndjson_arrow._scan import Column, Extra

REASON_NOT_UTF8 = "line is not valid UTF-8"
REASON_TRAILING = "trailing content after the JSON object"
REASON_ARRAY = "line is a JSON array, expected an object"
REASON_SCALAR = "line is a JSON scalar, expected an object"
REASON_MALFORMED = "malformed JSON"
REASON_TOO_DEEP = f"JSON nested deeper than {ndjson_arrow.MAX_DEPTH} levels"
REASON_TOO_MANY_KEYS = f"more than {ndjson_arrow.MAX_LINE_KEYS} distinct keys in one object"
REASON_SURROGATE = "lone UTF-16 surrogate escape (\\uD800-\\uDFFF unpaired): not a character, no UTF-8 text holds it"
_REASONS = {
    ndjson_arrow.NOT_UTF8: REASON_NOT_UTF8,
    ndjson_arrow.TRAILING: REASON_TRAILING,
    ndjson_arrow.ARRAY: REASON_ARRAY,
    ndjson_arrow.SCALAR: REASON_SCALAR,
    ndjson_arrow.MALFORMED: REASON_MALFORMED,
    ndjson_arrow.TOO_DEEP: REASON_TOO_DEEP,
    ndjson_arrow.TOO_MANY_KEYS: REASON_TOO_MANY_KEYS,
    ndjson_arrow.SURROGATE: REASON_SURROGATE,
}
# The most cells (rows x columns: an offset each, 4 bytes, and a validity bit) a scan holds, and so
# a chunk's columns at most ~150 MB, whatever its rows and the columns known (see tasks.MEMORY).
MAX_CELLS = 32 * 1024 * 1024
LINE = pa.int64()


@dataclass(frozen=True)
class BadLine:
    line: int
    reason: str
    raw: str  # the line's text, its first RAW_BYTES when it is longer
    size: int = 0  # the line's bytes, when raw holds only the first of them


# The most of a bad line a quarantine record keeps: a malformed line may be up to --max_line_mb, and its
# JSON in the record up to 6x that (a control byte is written \u0001). The source object has the rest,
# by its line number.
RAW_BYTES = 64 * 1024


@dataclass(frozen=True)
class ParsedText:
    """The rows of one NDJSON text (or of its first ``consumed`` bytes): ``columns[i]`` holds the
    values of ``keys[i]``; ``extra`` the values of keys that had no column (``None`` when there
    were none); ``lines`` the int64 number of each row's line; ``next_line`` the number of the
    first line not read."""

    keys: tuple[str, ...]
    columns: list[pa.Array]
    lines: pa.Array
    bad: list[BadLine]
    extra: pa.Array | None = None
    consumed: int = 0
    next_line: int = 1
    probes: int = 0  # hash-table slots the scan visited (its cost in lookups)

    @property
    def rows(self) -> int:
        return len(self.lines)

    @property
    def extra_values(self) -> int:
        """How many values went to ``extra``."""
        return 0 if self.extra is None else len(self.extra.keys)


def parse_ndjson(
    data: bytes | memoryview,
    known: Sequence[str] = (),
    *,
    room: int | None = None,
    first_line: int = 1,
    max_cells: int = 0,
    taken: frozenset[str] = frozenset(),
    exact: frozenset[str] = frozenset(),
) -> ParsedText:
    """Parse whole lines of ``data`` (one object per line, LF or CRLF) into string columns, from its
    start: all of it, or up to where ``max_cells`` (0: no bound) or the scanner's key bounds stop
    the scan (``consumed``; at least one line).

    ``keys`` of the result are ``known`` (in its order), then the keys first seen here, in the
    order seen, while there is ``room`` for them (default: no limit), they are valid column names
    and they are not another case of a column the table has (``taken``: its keys, lower-cased;
    engines resolve names case-insensitively, so ``Kind`` next to a known ``kind`` would rename
    ``kind``'s column) unless they are that very key (``exact``: keys a share set aside will add);
    the values of any other key are in ``extra``. Values: strings as text, nested objects
    and arrays as compact JSON (literals as written), numbers and booleans as their literal,
    ``null`` as NULL. Lines are numbered from ``first_line``.
    """
    limit = len(data) + 1 if room is None else max(0, room)  # no text has more keys than bytes
    new, columns, lines, rows, bad, extra, consumed, next_line, probes = ndjson_arrow.scan(
        data, known, limit, first_line=first_line, max_cells=max_cells
    )
    arrays = [_column(c, rows) for c in columns]
    extra_array = None if extra is None else _extra(extra, rows)
    keys = [*known, *new]
    unnamed = [
        i
        for i in range(len(known), len(keys))
        if not nameable(keys[i]) or (keys[i].lower() in taken and keys[i] not in exact)
    ]
    if unnamed:  # their values go to extra under their own key: nothing is lost, no name is refused or moved
        extra_array = to_map([keys[i] for i in unnamed], [arrays[i] for i in unnamed], rows, base=extra_array)
        drop = set(unnamed)
        keys = [k for i, k in enumerate(keys) if i not in drop]
        arrays = [a for i, a in enumerate(arrays) if i not in drop]
    return ParsedText(
        keys=tuple(keys),
        columns=arrays,
        lines=pa.Array.from_buffers(LINE, rows, [None, pa.py_buffer(lines)]),
        bad=[_bad_line(data, n, _REASONS[code], a, b) for n, code, a, b in bad],
        extra=extra_array,
        consumed=consumed,
        next_line=next_line,
        probes=probes,
    )


def parse_pieces(
    data: bytes | memoryview,
    keys: list[str],
    *,
    max_columns: int,
    first_line: int = 1,
    max_cells: int = MAX_CELLS,
    taken: frozenset[str] = frozenset(),
    exact: frozenset[str] = frozenset(),
) -> Iterator[ParsedText]:
    """All of ``data`` in scans of at most ``max_cells`` cells each; ``keys`` grows with the new
    columns each piece admits (while fewer than ``max_columns``; never another case of ``taken``)."""
    view = memoryview(data)
    at, line = 0, first_line
    while at < len(view):
        parsed = parse_ndjson(
            view[at:],
            keys,
            room=max_columns - len(keys),
            first_line=line,
            max_cells=max_cells,
            taken=taken,
            exact=exact,
        )
        keys.extend(parsed.keys[len(keys) :])
        at += parsed.consumed
        line = parsed.next_line
        yield parsed


# -- internals -------------------------------------------------------------------------------
def _column(parts: Column | None, rows: int) -> pa.Array:
    if parts is None:
        return pa.nulls(rows, STRING)
    offsets, values, validity, nulls = parts
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(values)]
    return pa.Array.from_buffers(STRING, rows, buffers, null_count=nulls)


def _extra(parts: Extra, rows: int) -> pa.Array:
    row_offsets, validity, nulls, key_offsets, keys, value_offsets, values, entries = parts
    text = pa.string()
    names = pa.Array.from_buffers(text, entries, [None, pa.py_buffer(key_offsets), pa.py_buffer(keys)])
    items = pa.Array.from_buffers(text, entries, [None, pa.py_buffer(value_offsets), pa.py_buffer(values)])
    pairs = pa.StructArray.from_arrays([names, items], fields=[EXTRA_TYPE.key_field, EXTRA_TYPE.item_field])
    return pa.Array.from_buffers(
        EXTRA_TYPE,
        rows,
        [pa.py_buffer(validity), pa.py_buffer(row_offsets)],
        null_count=nulls,
        children=[pairs],
    )


def _bad_line(data: bytes | memoryview, line: int, reason: str, start: int, end: int) -> BadLine:
    if end - start <= RAW_BYTES:
        return BadLine(line, reason, _text(data[start:end]))
    return BadLine(line, reason, _text(data[start : start + RAW_BYTES]), end - start)


def _text(line: bytes | memoryview) -> str:
    return bytes(line).removesuffix(b"\r").decode("utf-8", errors="replace")
