"""Declared column types (``--schema``): conversion of the raw JSON text of a column, with rescue.

A schema file is JSON::

    {"columns": {
        "amount": "decimal(12,2)",
        "qty": "bigint",
        "price": "double",
        "paid": "boolean",
        "day": "date",
        "ts": {"type": "timestamp", "format": "iso8601"},
        "sent_at": {"type": "timestamp", "format": "epoch_ms"}
    }}

Types: ``string``, ``bigint``, ``double``, ``decimal(p,s)``, ``boolean``, ``date``, ``timestamp`` (format
``iso8601`` (default; without an offset it is UTC), ``epoch_s`` or ``epoch_ms``). Columns not declared
stay strings. A value that does not convert is never lost: its column is NULL and its original text
goes to the ``_rescued`` map column (key -> the value's text), counted in ``RescuedValues``.
Conversion is vectorised (Arrow compute over the column's texts); only an array holding a value that
passes the pattern check but not Arrow's parser (a 13th month) falls back to Python for that array.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contracts.column_names import MAX_DATA_COLUMNS, valid_column_name
from contracts.exceptions import ConfigError
from glue_processor.shared.names import STRING, TIMESTAMP

RESCUED = "_rescued"
RESCUED_TYPE = pa.map_(pa.string(), pa.string())
_INT = r"^-?[0-9]{1,19}$"
_INT_DIGITS = pa.decimal128(19, 0)
_INT64 = (pa.scalar(-(2**63), _INT_DIGITS), pa.scalar(2**63 - 1, _INT_DIGITS))
_NUMBER = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$"
_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_ISO = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?)?(Z|[+-][0-9]{2}(:?[0-9]{2})?)?$"
_OFFSET = r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)$"
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
FORMATS = ("iso8601", "epoch_s", "epoch_ms")


@dataclass(frozen=True)
class Column:
    key: str
    type: str  # string | bigint | double | decimal(p,s) | boolean | date | timestamp
    format: str = "iso8601"

    @property
    def arrow_type(self) -> pa.DataType:
        if m := _DECIMAL.match(self.type):
            return pa.decimal128(int(m[1]), int(m[2]))
        return {
            "string": STRING,
            "bigint": pa.int64(),
            "double": pa.float64(),
            "boolean": pa.bool_(),
            "date": pa.date32(),
            "timestamp": TIMESTAMP,
        }[self.type]


@dataclass(frozen=True)
class DeclaredSchema:
    columns: tuple[Column, ...]

    def get(self, key: str) -> Column | None:
        for c in self.columns:
            if c.key == key:
                return c
        return None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.columns)


def column_type(key: str, declared: DeclaredSchema | None) -> pa.DataType:
    """The type of a key's column: its declared type, else a string."""
    column = declared.get(key) if declared is not None else None
    return column.arrow_type if column is not None else STRING


def parse_schema(text: str | bytes, *, source: str = "--schema") -> DeclaredSchema:
    """The schema file, or a :class:`ConfigError` naming what is wrong and where."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{source}: not JSON ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("columns"), dict) or not doc["columns"]:
        raise ConfigError(f'{source}: expected {{"columns": {{"<key>": "<type>", ...}}}}')
    out = []
    for key, spec in doc["columns"].items():
        kind, fmt = (spec, "iso8601") if isinstance(spec, str) else (spec.get("type"), spec.get("format", "iso8601"))
        column = Column(str(key), str(kind), str(fmt))
        if not valid_column_name(column.key):
            raise ConfigError(
                f"{source}: column {key!r} cannot be a column of the table (contracts/column_names.py: 1-128 "
                "characters, at most 255 UTF-8 bytes, no control character but tab)"
            )
        if len(doc["columns"]) > MAX_DATA_COLUMNS:
            raise ConfigError(f"{source}: {len(doc['columns'])} columns; a table has at most {MAX_DATA_COLUMNS}")
        try:
            column.arrow_type  # noqa: B018 - validates the type name
        except KeyError:
            raise ConfigError(
                f"{source}: column {key!r} has type {kind!r}; expected string, bigint, double, decimal(p,s), "
                "boolean, date or timestamp"
            ) from None
        if (m := _DECIMAL.match(column.type)) and (not 1 <= int(m[1]) <= 38 or int(m[2]) > int(m[1])):
            raise ConfigError(f"{source}: column {key!r}: decimal precision 1..38 and scale <= precision")
        if column.type == "timestamp" and column.format not in FORMATS:
            raise ConfigError(f"{source}: column {key!r}: timestamp format {fmt!r}; expected one of {FORMATS}")
        out.append(column)
    return DeclaredSchema(tuple(out))


def convert(raw: pa.Array, column: Column) -> tuple[pa.Array, pa.Array]:
    """(converted values, mask of values that did not convert) for a string array of JSON texts."""
    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks()
    raw = raw.cast(STRING) if raw.type != STRING else raw
    if column.type == "string":
        return raw, pa.array(np.zeros(len(raw), dtype=bool))
    target = column.arrow_type
    try:
        values = _vectorised(raw, column, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        values = pa.array([_one(v, column) for v in raw.to_pylist()], target)
    if column.type in ("date", "timestamp"):
        values = _in_calendar(values)
    failed = pc.and_(pc.is_valid(raw), pc.is_null(values))
    return values, failed


# The days and instants a table may hold: years 1 to 9999, in UTC. Arrow parses year 0 and, through
# an offset, year 10000 (and epoch values up to int64); pyiceberg reads a file's bounds into Python's
# datetime, which stops at these, so one such value made every attempt to publish its batch fail
# (OverflowError), and engines disagree past them. Such a value is rescued, as 1e400 is for a double.
FIRST = datetime(1, 1, 1, tzinfo=UTC)
LAST = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def _in_calendar(values: pa.Array) -> pa.Array:
    if pa.types.is_date(values.type):
        low, high = pa.scalar(FIRST.date(), values.type), pa.scalar(LAST.date(), values.type)
    else:
        low, high = pa.scalar(FIRST, values.type), pa.scalar(LAST, values.type)
    inside = pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high))
    return pc.if_else(inside, values, pa.nulls(len(values), values.type))


def _vectorised(raw: pa.Array, column: Column, target: pa.DataType) -> pa.Array:
    null = pa.nulls(len(raw), STRING)
    if column.type == "boolean":
        return pc.if_else(pc.equal(raw, "true"), True, pc.if_else(pc.equal(raw, "false"), False, None))
    if column.type == "bigint":  # up to 19 digits, through an exact decimal: every int64, nothing past it
        digits = pc.if_else(pc.match_substring_regex(raw, _INT), raw, null).cast(_INT_DIGITS)
        inside = pc.and_(pc.greater_equal(digits, _INT64[0]), pc.less_equal(digits, _INT64[1]))
        return pc.if_else(inside, digits, pa.nulls(len(raw), _INT_DIGITS)).cast(pa.int64())
    if column.type == "double":
        number = pc.if_else(pc.match_substring_regex(raw, _NUMBER), raw, null).cast(pa.float64())
        return pc.if_else(pc.is_finite(number), number, None)  # 1e400 is not a double: rescued
    if m := _DECIMAL.match(column.type):
        precision, scale = int(m[1]), int(m[2])
        fraction = rf"(\.[0-9]{{1,{scale}}})?" if scale else ""
        pattern = rf"^-?[0-9]{{1,{max(1, precision - scale)}}}{fraction}$"
        return pc.if_else(pc.match_substring_regex(raw, pattern), raw, null).cast(target)
    if column.type == "date":
        return pc.if_else(pc.match_substring_regex(raw, _DATE), raw, null).cast(pa.timestamp("s")).cast(pa.date32())
    # timestamp
    if column.format in ("epoch_s", "epoch_ms"):
        seconds = pc.if_else(pc.match_substring_regex(raw, _NUMBER), raw, null).cast(pa.float64())
        micros = pc.multiply(seconds, 1_000_000 if column.format == "epoch_s" else 1_000)
        in_range = pc.and_(pc.greater(micros, -9.2e18), pc.less(micros, 9.2e18))
        return pc.if_else(in_range, pc.round(micros), None).cast(pa.int64()).cast(TIMESTAMP)
    iso = pc.match_substring_regex(raw, _ISO)
    with_offset = pc.and_(iso, pc.match_substring_regex(raw, _OFFSET))
    naive = pc.and_(iso, pc.invert(with_offset))
    aware = pc.if_else(with_offset, raw, null).cast(TIMESTAMP)
    local = pc.replace_substring(pc.if_else(naive, raw, null), " ", "T").cast(pa.timestamp("us")).cast(TIMESTAMP)
    return pc.if_else(with_offset, aware, local)


def _one(text: str | None, column: Column) -> Any:
    """One value, in Python: the fallback when Arrow's parser rejects a value the pattern let through."""
    if text is None:
        return None
    try:
        if column.type == "date":
            return date.fromisoformat(text)
        if column.type == "timestamp" and column.format == "iso8601":
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        return pa.array([text], STRING).cast(column.arrow_type)[0].as_py()
    except (ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def conform(data: dict[str, pa.Array], declared: DeclaredSchema) -> tuple[dict[str, pa.Array], pa.Array, int]:
    """Declared columns converted; the ``_rescued`` map of what did not convert; how many values that was."""
    out = dict(data)
    rows = len(next(iter(data.values()))) if data else 0
    hits: list[tuple[np.ndarray, str, pa.Array]] = []
    for key, array in data.items():
        column = declared.get(key)
        if column is None:
            continue
        raw = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
        values, failed = convert(raw, column)
        out[key] = values
        where = np.flatnonzero(failed.to_numpy(zero_copy_only=False))
        if len(where):
            hits.append((where, key, raw.take(pa.array(where))))
    return out, rescued_map(rows, hits), sum(len(w) for w, _, _ in hits)


def rescued_map(rows: int, hits: list[tuple[np.ndarray, str, pa.Array]]) -> pa.Array:
    """A map<string,string> per row from (row indices, key, raw texts) per column; NULL where empty."""
    if not hits:
        return pa.nulls(rows, RESCUED_TYPE)
    row = np.concatenate([w for w, _, _ in hits])
    order = np.argsort(row, kind="stable")
    keys = pa.concat_arrays([pa.array([k] * len(w), pa.string()) for w, k, _ in hits]).take(pa.array(order))
    items = pa.concat_arrays([v.cast(pa.string()) for _, _, v in hits]).take(pa.array(order))
    counts = np.bincount(row, minlength=rows)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    mask = pa.array(counts == 0)
    return pa.MapArray.from_arrays(pa.array(offsets), keys, items, mask=mask)
