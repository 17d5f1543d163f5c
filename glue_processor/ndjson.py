"""NDJSON bytes -> Arrow string columns, one per top-level key (pure: no I/O, no Spark).

This is the hot loop of the job. The bytes are scanned once by :mod:`ndjson_arrow` (native code,
no Python object per line or value), which validates every line and copies each value into its
key's column as the README's output semantics say: strings unescaped, numbers and booleans as
written, nested values as compact text, ``null`` as NULL. Here the column buffers only become
Arrow arrays, without copying them again.

A line is a row when it is one JSON object in valid UTF-8 and nothing else; anything else (bar
blank lines) becomes a :class:`BadLine` with its number and reason, whatever keys are known.
Keys past the column room (``room``) never become columns: their values come back in ``extra``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import ndjson_arrow
import pyarrow as pa

from glue_processor.overflow import EXTRA_TYPE

if TYPE_CHECKING:
    from ndjson_arrow._scan import Column, Extra

# Lineage columns added to every output row. Data fields with the same names are renamed.
LINEAGE_COLUMNS = ("_source_uri", "_source_etag", "_line", "_event_time", "_batch_id", "_ingest_time")
# Other columns of the job's own: keys past the column bound, and declared values that did not convert.
RESERVED_COLUMNS = (*LINEAGE_COLUMNS, "_extra", "_rescued")

REASON_NOT_UTF8 = "line is not valid UTF-8"
REASON_TRAILING = "trailing content after the JSON object"
REASON_ARRAY = "line is a JSON array, expected an object"
REASON_SCALAR = "line is a JSON scalar, expected an object"
REASON_MALFORMED = "malformed JSON"
REASON_TOO_DEEP = f"JSON nested deeper than {ndjson_arrow.MAX_DEPTH} levels"
_REASONS = {
    ndjson_arrow.NOT_UTF8: REASON_NOT_UTF8,
    ndjson_arrow.TRAILING: REASON_TRAILING,
    ndjson_arrow.ARRAY: REASON_ARRAY,
    ndjson_arrow.SCALAR: REASON_SCALAR,
    ndjson_arrow.MALFORMED: REASON_MALFORMED,
    ndjson_arrow.TOO_DEEP: REASON_TOO_DEEP,
}

STRING = pa.string()


@dataclass(frozen=True)
class BadLine:
    line: int
    reason: str
    raw: str


@dataclass(frozen=True)
class ParsedText:
    """The rows of one NDJSON text: ``columns[i]`` holds the values of ``keys[i]``; ``extra`` the
    values of keys that had no room for a column (``None`` when there were none)."""

    keys: tuple[str, ...]
    columns: list[pa.Array]
    lines: pa.Array
    bad: list[BadLine]
    extra: pa.Array | None = None

    @property
    def rows(self) -> int:
        return len(self.lines)

    @property
    def extra_values(self) -> int:
        """How many values went to ``extra``."""
        return 0 if self.extra is None else len(self.extra.keys)


def parse_ndjson(data: bytes | memoryview, known: Sequence[str] = (), *, room: int | None = None) -> ParsedText:
    """Parse ``data`` (one object per line, LF or CRLF) into string columns.

    ``keys`` of the result are ``known`` (in its order), then the keys first seen here, in the
    order seen, while there is ``room`` for them (default: no limit); the values of any other key
    are in ``extra``. Values: strings as text, nested objects and arrays as compact JSON (literals
    as written), numbers and booleans as their literal, ``null`` as NULL.
    """
    limit = len(data) + 1 if room is None else max(0, room)  # no text has more keys than bytes
    new, columns, lines, rows, bad, extra = ndjson_arrow.scan(data, known, limit)
    return ParsedText(
        keys=(*known, *new),
        columns=[_column(c, rows) for c in columns],
        lines=pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(lines)]),
        bad=[BadLine(n, _REASONS[code], _text(data[a:b])) for n, code, a, b in bad],
        extra=None if extra is None else _extra(extra, rows),
    )


def column_names(keys: Sequence[str]) -> list[tuple[str, str]]:
    """Map JSON keys to Parquet column names, deterministically.

    Engines such as Athena and Spark (by default) resolve column names case-insensitively, so
    keys that differ only by case, or that collide with a column of the job's own, get a suffix
    ``__2``, ``__3``... in sorted order. An empty key becomes ``_empty_key``.
    """
    taken = {name.lower() for name in RESERVED_COLUMNS}
    mapping: list[tuple[str, str]] = []
    for key in sorted(set(keys)):
        base = key if key else "_empty_key"
        name, n = base, 1
        while name.lower() in taken:
            n += 1
            name = f"{base}__{n}"
        taken.add(name.lower())
        mapping.append((key, name))
    return sorted(mapping, key=lambda kv: (kv[1].lower(), kv[1]))


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


def _text(line: bytes | memoryview) -> str:
    return bytes(line).removesuffix(b"\r").decode("utf-8", errors="replace")
