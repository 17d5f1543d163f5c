"""NDJSON bytes -> Arrow string columns, one per top-level key (pure: no I/O, no Spark).

This is the hot loop of the job, so it does as little per value in Python as it can:

* each line is decoded by msgspec into a struct of ``msgspec.Raw`` fields, one per known key.
  Raw values are the JSON text as written, so nested values are never built as Python objects,
  numbers keep their exact literal, and a repeated key keeps its last value;
* each column of raw texts becomes one Arrow array in a single encode (no per-value copy), and
  the rest is vectorised at byte level in numpy: quotes off strings, ``null`` to NULL, white space
  outside strings out of nested values. Strings with escapes are decoded in one msgspec call per
  column.

A line is a row when it is one JSON object and nothing else; anything else (bar blank lines)
becomes a :class:`BadLine` with its number and reason.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Lineage columns added to every output row. Data fields with the same names are renamed.
LINEAGE_COLUMNS = ("_source_uri", "_source_etag", "_line", "_event_time", "_batch_id", "_ingest_time")
# Other columns of the job's own: keys past the column bound, and declared values that did not convert.
RESERVED_COLUMNS = (*LINEAGE_COLUMNS, "_extra", "_rescued")

REASON_NOT_UTF8 = "line is not valid UTF-8"
REASON_TRAILING = "trailing content after the JSON object"
REASON_ARRAY = "line is a JSON array, expected an object"
REASON_SCALAR = "line is a JSON scalar, expected an object"
REASON_MALFORMED = "malformed JSON"
REASON_TOO_DEEP = "JSON nested deeper than about 10000 levels"

# Nesting depth a line may have (msgspec recurses per level; Python's default limit is ~1000).
MAX_DEPTH = 10_000

_NULL = msgspec.Raw(b"null")
_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()
_STRINGS = msgspec.json.Decoder(list[str])
_DICT_ROWS = msgspec.json.Decoder(dict[str, msgspec.Raw])
# The sparse path: at least this many known keys, and rows holding at most this share of them.
SPARSE_MIN_KEYS = 64
SPARSE_DENSITY = 0.25
SPARSE_SAMPLE_LINES = 200
_ENCODER = msgspec.json.Encoder()
# UnicodeDecodeError: msgspec decodes keys (not raw values) as UTF-8 while it matches them to fields.
_ERRORS = (msgspec.MsgspecError, RecursionError, UnicodeDecodeError)
# A line of JSON white space only (space, tab, CR) is blank; other control characters are not.
_JSON_WHITE = b" \t\r"
STRING = pa.large_string()
_QUOTE, _N, _BACKSLASH, _BRACE, _BRACKET = (ord(c) for c in '"n\\{[')
_WHITE = np.zeros(256, dtype=bool)
_WHITE[[ord(c) for c in " \t\r\n"]] = True


@dataclass(frozen=True)
class BadLine:
    line: int
    reason: str
    raw: str


@dataclass(frozen=True)
class ParsedText:
    """The rows of one NDJSON text: ``columns[i]`` holds the values of ``keys[i]``."""

    keys: tuple[str, ...]
    columns: list[pa.Array]
    lines: pa.Array
    bad: list[BadLine]

    @property
    def rows(self) -> int:
        return len(self.lines)


def parse_ndjson(data: bytes, known: Sequence[str] = ()) -> ParsedText:
    """Parse ``data`` (one object per line, LF or CRLF) into string columns.

    ``keys`` of the result are ``known`` (in an order of its own) and the keys first seen here. Values:
    strings as text, nested objects and arrays as compact JSON (literals as written), numbers
    and booleans as their literal, ``null`` as NULL.
    """
    # msgspec cannot name a struct field with a quote, backslash or control character: rows with
    # such keys take the slower dict path.
    head = tuple(k for k in known if _fieldable(k))
    others = tuple(k for k in known if not _fieldable(k))
    decoder = _row_decoder(head)
    valid = _is_utf8(data)
    if valid and len(known) >= SPARSE_MIN_KEYS:
        sparse = _parse_sparse(data, known)
        if sparse is not None:
            return sparse
    if valid:
        # The common case, every line one object of known keys: msgspec decodes all in one call.
        fast = _decode_all(decoder, data)
        if fast is not None:
            return _struct_result(fast, head, others)
        # keys not known yet (a task's first file, or a file with new keys): learnt in one call
        learnt = _parse_new_keys(data, known, others)
        if learnt is not None:
            return learnt
    lines = data.split(b"\n")
    invalid = set() if valid else {n for n, line in enumerate(lines, 1) if not _is_utf8(line)}
    decode = decoder.decode
    rows: list[Any] = []
    numbers: list[int] = []
    failed: list[int] = []
    for number, line in enumerate(lines, 1):
        if number in invalid:  # never a row, whatever msgspec makes of it (raw values are not checked)
            failed.append(number)
            continue
        try:
            rows.append(decode(line))
        except _ERRORS:
            failed.append(number)
            continue
        numbers.append(number)
    bad: list[BadLine] = []
    wider: list[tuple[int, dict[str, Any]]] = []
    for number in failed:
        line = lines[number - 1]
        if not line.strip(_JSON_WHITE):
            continue
        if number in invalid:
            bad.append(BadLine(number, REASON_NOT_UTF8, _text(line)))
            continue
        obj, reason = _classify(line)
        if obj is None:
            bad.append(BadLine(number, reason, _text(line)))
        else:
            wider.append((number, obj))
    tail = others + tuple(sorted({k for _, obj in wider for k in obj} - set(known)))
    keys = head + tail
    columns = _struct_columns(rows, len(head))
    columns += [pa.nulls(len(rows), STRING) for _ in tail]
    line_numbers = pa.array(numbers, pa.int32())
    if wider:
        # Rows with keys not known yet (or not fit for a struct field), from their dicts.
        more = _columns([tuple(obj.get(k, _NULL) for k in keys) for _, obj in wider], len(keys))
        columns = [pa.concat_arrays([a, b]) for a, b in zip(columns, more, strict=True)]
        line_numbers = pa.concat_arrays([line_numbers, pa.array([n for n, _ in wider], pa.int32())])
        order = pc.sort_indices(line_numbers)
        columns = [c.take(order) for c in columns]
        line_numbers = line_numbers.take(order)
    return ParsedText(keys=keys, columns=columns, lines=line_numbers, bad=bad)


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
@functools.lru_cache(maxsize=16)
def _row_decoder(keys: tuple[str, ...]) -> msgspec.json.Decoder[Any]:
    """A decoder of objects whose keys are all in ``keys`` (any other key is an error)."""
    fields = [(f"f{i}", msgspec.Raw, _NULL) for i in range(len(keys))]
    rename = {f"f{i}": key for i, key in enumerate(keys)}
    row = msgspec.defstruct("Row", fields, rename=rename, forbid_unknown_fields=True)
    return msgspec.json.Decoder(row)


def _decode_all(decoder: msgspec.json.Decoder[Any], data: bytes) -> list[Any] | None:
    """Every line as a row, or None when some line is not one (blank, bad, or with a new key).

    ``decode_lines`` takes any white space between values, so its row count equals the line count
    only when no line is blank: then no line holds two objects either (each line holds at least one)."""
    if _has_blank_line(data):
        return None
    try:
        rows: list[Any] = decoder.decode_lines(data)
    except _ERRORS:
        return None
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    return rows if len(rows) == lines else None


def _struct_result(rows: list[Any], head: tuple[str, ...], others: tuple[str, ...]) -> ParsedText:
    columns = _struct_columns(rows, len(head))
    columns += [pa.nulls(len(rows), STRING) for _ in others]
    numbers = pa.array(np.arange(1, len(rows) + 1, dtype=np.int32))
    return ParsedText(keys=head + others, columns=columns, lines=numbers, bad=[])


def _parse_new_keys(data: bytes, known: Sequence[str], others: tuple[str, ...]) -> ParsedText | None:
    """Every line one object, some with keys not in ``known``: one dict decode finds the keys, then
    the rows take the struct path with them (or the sparse path, when they are many and rows hold
    few). None when a line is not an object of one line, or a new key cannot be a struct field."""
    rows = _decode_all(_DICT_ROWS, data)
    if not rows:
        return None
    new = sorted(set().union(*rows).difference(known))
    if not new or not all(map(_fieldable, new)):
        return None
    keys = (*known, *new)
    if len(keys) >= SPARSE_MIN_KEYS and sum(map(len, rows)) <= SPARSE_DENSITY * len(rows) * len(keys):
        return _sparse_rows(rows, keys)
    head = tuple(k for k in keys if _fieldable(k))
    fast = _decode_all(_row_decoder(head), data)
    return None if fast is None else _struct_result(fast, head, others)


def _parse_sparse(data: bytes, known: Sequence[str]) -> ParsedText | None:
    """Many known keys, few of them per row (keys that vary per record): a struct per row would cost
    ``rows x known keys`` however few keys a row has; dicts cost what the rows hold. None when a line
    is not an object of one line, or the rows are not sparse (the struct path is faster then)."""
    # a sample first: dense rows (wide records) must not pay for a dict decode they do not use
    cut = 0
    for _ in range(SPARSE_SAMPLE_LINES):
        cut = data.find(b"\n", cut) + 1
        if cut == 0:
            cut = len(data)
            break
    sample = _decode_all(_DICT_ROWS, data[:cut])
    if sample is None or sum(map(len, sample)) > SPARSE_DENSITY * len(sample) * len(known):
        return None
    rows = sample if cut == len(data) else _decode_all(_DICT_ROWS, data)
    if rows is None:
        return None
    if sum(map(len, rows)) > SPARSE_DENSITY * len(rows) * len(known):
        return None
    return _sparse_rows(rows, (*known, *sorted(set().union(*rows).difference(known))))


def _sparse_rows(rows: list[dict[str, msgspec.Raw]], keys: tuple[str, ...]) -> ParsedText:
    """Columns of dict rows over ``keys`` (every key the rows hold), each key's values grouped by one
    stable sort: cost follows what the rows hold, not rows x keys."""
    present = sum(map(len, rows))
    index = {k: i for i, k in enumerate(keys)}
    n = len(rows)
    # every (row, key, value) flat, grouped by key with a stable sort: each key's values in row order
    sizes = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    row_of = np.repeat(np.arange(n, dtype=np.int64), sizes)
    key_of = np.fromiter(map(index.__getitem__, itertools.chain.from_iterable(rows)), dtype=np.int64, count=present)
    flat = list(itertools.chain.from_iterable(map(dict.values, rows)))
    order = np.argsort(key_of, kind="stable")
    bounds = np.searchsorted(key_of[order], np.arange(len(keys) + 1)).tolist()
    # every value in key order, made strings in one pass; each key's values are then a slice
    values = _strings(tuple(map(flat.__getitem__, order.tolist()))) if present else pa.nulls(0, STRING)
    columns = []
    for c in range(len(keys)):
        start, stop = bounds[c], bounds[c + 1]
        if start == stop:
            columns.append(pa.nulls(n, STRING))
            continue
        dense = values.slice(start, stop - start)
        columns.append(dense if stop - start == n else _spread(dense, row_of[order[start:stop]], n))
    return ParsedText(keys=keys, columns=columns, lines=pa.array(np.arange(1, n + 1, dtype=np.int32)), bad=[])


def _spread(dense: pa.Array, rows: np.ndarray, n: int) -> pa.Array:
    """``dense`` (values of rows ``rows``, ascending) as a column of ``n`` rows, NULL elsewhere: the
    value bytes stay as they are, only the offsets and the validity change."""
    _, offsets_buf, data_buf = dense.buffers()[:3]
    dense_offsets = np.frombuffer(offsets_buf, dtype=np.int64, count=len(dense) + 1, offset=dense.offset * 8)
    valid = np.zeros(n, dtype=bool)
    valid[rows] = True
    if dense.null_count:
        valid[rows[~np.asarray(dense.is_valid().to_numpy(zero_copy_only=False), dtype=bool)]] = False
    sizes = np.zeros(n, dtype=np.int64)
    sizes[rows] = np.diff(dense_offsets)
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = dense_offsets[0]
    np.cumsum(sizes, out=offsets[1:])
    offsets[1:] += dense_offsets[0]
    return pa.LargeStringArray.from_buffers(
        n,
        pa.py_buffer(offsets),
        data_buf,
        null_bitmap=pa.py_buffer(np.packbits(valid, bitorder="little")),
        null_count=int(n - valid.sum()),
    )


def _has_blank_line(data: bytes) -> bool:
    """Whether a line of ``data`` (its final newline ends the last line) is JSON white space only:
    one vectorised pass finds the lines that are empty or start with white space; only those are
    looked at."""
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    if end <= 0:
        return True
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf[:end] == 10)
    starts = np.concatenate(([0], newlines + 1))
    if starts[-1] >= end:
        return True  # the last line is empty
    suspects = starts[_WHITE[buf[starts]]]
    for a in suspects.tolist():
        stop = data.find(b"\n", a, end)
        if not data[a : end if stop < 0 else stop].strip(_JSON_WHITE):
            return True
    return False


def _is_utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _text(line: bytes) -> str:
    return line.removesuffix(b"\r").decode("utf-8", errors="replace")


@contextlib.contextmanager
def _deep() -> Iterator[None]:
    """Let msgspec follow nesting up to ``MAX_DEPTH`` levels."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, MAX_DEPTH + 200))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _classify(line: bytes) -> tuple[dict[str, Any] | None, str]:
    """An object with keys not known yet, or why the line is not one JSON object."""
    with _deep():
        try:
            return _OBJECT.decode(line), ""
        except msgspec.ValidationError:
            # not an object; but msgspec stops at the first token, so check the rest is JSON at all
            try:
                _ANY.decode(line)
            except msgspec.DecodeError as exc:
                return None, REASON_TRAILING if "trailing characters" in str(exc) else REASON_MALFORMED
            return None, REASON_ARRAY if line.lstrip(_JSON_WHITE).startswith(b"[") else REASON_SCALAR
        except msgspec.DecodeError as exc:
            return None, REASON_TRAILING if "trailing characters" in str(exc) else REASON_MALFORMED
        except RecursionError:
            return None, REASON_TOO_DEEP


def _struct_columns(rows: list[Any], width: int) -> list[pa.Array]:
    """Columns of decoded row structs: one attribute getter per field (twice as fast as tuples)."""
    if not rows or not width:
        return [pa.nulls(len(rows), STRING) for _ in range(width)]
    return [_strings(tuple(map(_field(i), rows))) for i in range(width)]


@functools.cache
def _field(i: int) -> Any:
    return operator.attrgetter(f"f{i}")


def _columns(rows: list[tuple[msgspec.Raw, ...]], width: int) -> list[pa.Array]:
    if not rows or not width:
        return [pa.nulls(len(rows), STRING) for _ in range(width)]
    return [_strings(column) for column in zip(*rows, strict=True)]


def _fieldable(key: str) -> bool:
    return not any(ch in '"\\' or ord(ch) < 0x20 for ch in key)


def _strings(raw: tuple[msgspec.Raw, ...]) -> pa.Array:
    """Raw JSON texts -> string values: one encode for the column, then byte-level numpy.

    The encoded column is ``[v1,v2,...]``; dropping the brackets, separators, the quotes of
    strings and the ``null`` literals leaves the values back to back, which with their new
    lengths is an Arrow string array as it stands.
    """
    n = len(raw)
    body = _ENCODER.encode(raw)
    buf = np.frombuffer(body, dtype=np.uint8)
    lengths = np.fromiter(map(len, raw), dtype=np.int64, count=n)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 1
    np.cumsum(lengths[:-1] + 1, out=starts[1:])
    starts[1:] += 1
    ends = starts + lengths  # the separator after each value
    first = buf[starts]
    quoted = first == _QUOTE
    is_null = first == _N  # only the literal null starts with n
    keep = np.ones(len(buf), dtype=bool)
    keep[0] = False
    keep[ends] = False
    keep[starts[quoted]] = False
    keep[ends[quoted] - 1] = False
    null_starts = starts[is_null]
    for k in range(4):
        keep[null_starts + k] = False
    nested = (first == _BRACE) | (first == _BRACKET)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if nested.any() and _values_with(_WHITE[buf], starts, n)[nested].any():
        # nested values as compact text: white space outside strings dropped, in one pass
        keep &= ~_white_outside_strings(buf)
        kept = np.cumsum(keep, dtype=np.int64)
        offsets[1:] = kept[ends - 1]
    else:
        np.cumsum(np.where(is_null, 0, lengths - 2 * quoted), out=offsets[1:])
    values = pa.LargeStringArray.from_buffers(
        n,
        pa.py_buffer(offsets),
        pa.py_buffer(buf[keep]),
        null_bitmap=pa.py_buffer(np.packbits(~is_null, bitorder="little")),
        null_count=int(is_null.sum()),
    )
    escaped = quoted & _values_with(buf == _BACKSLASH, starts, n)
    if escaped.any():
        # strings with escapes: decoded together, one msgspec call for the column
        texts = b",".join([body[a:b] for a, b in zip(starts[escaped].tolist(), ends[escaped].tolist(), strict=True)])
        unescaped = pa.array(_STRINGS.decode(b"[" + texts + b"]"), STRING)
        values = pc.replace_with_mask(values, pa.array(escaped), unescaped)
    return values


def _white_outside_strings(buf: np.ndarray) -> np.ndarray:
    """Per byte of JSON text: white space outside strings. A quote opens or closes a string unless
    an odd run of backslashes precedes it."""
    index = np.arange(len(buf), dtype=np.int64)
    backslash = buf == _BACKSLASH
    quotes = np.flatnonzero(buf == _QUOTE)
    if backslash.any():
        last_other = np.maximum.accumulate(np.where(backslash, -1, index))
        before = quotes - 1
        run = np.where(before >= 0, before - last_other[np.maximum(before, 0)], 0)
        quotes = quotes[run % 2 == 0]
    toggles = np.zeros(len(buf) + 1, dtype=np.int8)
    toggles[quotes + 1] = 1
    inside = (np.cumsum(toggles[:-1], dtype=np.int64) & 1).astype(bool)
    result: np.ndarray = _WHITE[buf] & ~inside
    return result


def _values_with(hits: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """Per value: whether any of its bytes is a hit."""
    owners = np.searchsorted(starts, np.flatnonzero(hits), side="right") - 1
    found = np.zeros(n, dtype=bool)
    found[owners[owners >= 0]] = True
    return found
