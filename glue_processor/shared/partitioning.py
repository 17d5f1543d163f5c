"""Partitions from the record (``--partition_by``): the spec, and each row's partition in the tasks.

``--partition_by`` is a comma-separated list of Iceberg transforms over columns: ``year(c)``,
``month(c)``, ``day(c)``, ``hour(c)`` of a ``timestamp`` or ``date`` column (a declared one, or
``_event_time``/``_ingest_time``), and ``identity(c)`` (or just ``c``) of any column. The default is
``day(_ingest_time)``. A task splits its rows by partition before it writes, so every file holds one
partition (the table's statistics then name it); a row whose partition value is missing or did not
convert goes to the null partition, counted, never dropped.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from urllib.parse import quote_plus

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contracts.exceptions import ConfigError
from glue_processor.shared.declared import DeclaredSchema
from glue_processor.shared.extra import EXTRA, to_map
from glue_processor.shared.names import LINEAGE_COLUMNS, column_names, decoded, nameable

DEFAULT = "day(_ingest_time)"
TIME_TRANSFORMS = {"year": "%Y", "month": "%Y-%m", "day": "%Y-%m-%d", "hour": "%Y-%m-%d-%H"}
_UNITS = {"year": "year", "month": "month", "day": "day", "hour": "hour"}
TIME_COLUMNS = ("_event_time", "_ingest_time")
_FIELD = re.compile(r"^\s*(?:(year|month|day|hour|identity)\(\s*([^()]+?)\s*\)|([^(),]+?))\s*$")
NULL = "null"
# An identity value longer than this once encoded is cut to PATH_VALUE_HEAD characters, "!" and 32 hex
# digits of its SHA-256 (128 bits: two values a producer made to share a segment would need ~2**64
# tries): a value's segment is at most 96 characters.
PATH_VALUE_CHARS = 96
PATH_VALUE_HEAD = 48
HASH_HEX = 32
# The most a spec's partition path may take of a data file's key (S3: 1,024 bytes in all), checked
# for its longest values when --partition_by is read: the table's location, the batch's directories
# and the file's name take ~150 bytes more, and the output prefix the rest.
MAX_PARTITION_PATH = 640
# The longest identity value a file's partition can be read from: Arrow keeps no min/max for a value
# longer than this (parquet-cpp's max_statistics_size), and pyiceberg reads a file's partition from
# them, so a longer one would put its file in the null partition while its rows hold the value.
MAX_PARTITION_VALUE_BYTES = 4096


@dataclass(frozen=True)
class Field:
    transform: str  # year | month | day | hour | identity
    key: str  # the JSON key (or lineage column) it reads
    column: str  # the Parquet/Iceberg column name of that key
    name: str  # the partition field's name (Iceberg's default naming: <column>_<transform>)

    @property
    def path_name(self) -> str:
        """The name as its files' path writes it (as pyiceberg's ``partition_to_path``)."""
        return quote_plus(self.name, safe="")

    @property
    def longest_segment(self) -> int:
        """The most characters this field's ``name=value`` can take of a path."""
        value = PATH_VALUE_CHARS if self.transform == "identity" else len("-9999-12-31-23")
        return len(self.path_name) + 1 + max(value, len(NULL))


@dataclass(frozen=True)
class PartitionPlan:
    fields: tuple[Field, ...]

    def bound_values(self, table: pa.Table) -> tuple[pa.Table, int]:
        """``table`` with every identity value longer than MAX_PARTITION_VALUE_BYTES moved to
        ``_extra`` (under its key, as it was) and its column NULL there, and how many were moved:
        such a row is in the null partition, which its columns then agree with, and nothing is lost.
        A field's column a task holds as a dictionary (an object's ``_source_uri``) comes back
        decoded: its values are the partitions'."""
        moved = 0
        for f in self.fields:
            values = table.column(f.column)
            if pa.types.is_dictionary(values.type):
                values = decoded(values)
                table = table.set_column(table.column_names.index(f.column), f.column, values)
            if f.transform != "identity" or not (
                pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
            ):
                continue
            long = pc.fill_null(pc.greater(pc.binary_length(values), MAX_PARTITION_VALUE_BYTES), False)
            count = pc.sum(long).as_py() or 0
            if count:
                moved += count
                table = _to_extra(table, {f.column: f.key}, long.combine_chunks())
        return table, moved

    @property
    def null_label(self) -> str:
        """The label of the partition whose every field is NULL (where overflow rows go)."""
        return "/".join(f"{f.path_name}={NULL}" for f in self.fields)

    def demote(self, table: pa.Table, rows: pa.BooleanArray | None = None) -> pa.Table:
        """``table``'s rows (those ``rows`` marks, or all) moved to the null partition: every
        field's source value to ``_extra`` under its key, as text (ISO 8601 for a time), and its
        column NULL there. For the rows of partitions past a batch's ``--partition_limit_per_batch``:
        their files then agree with the partition they are appended to, and no value is lost
        (``_extra['<key>']`` holds it)."""
        return _to_extra(table, {f.column: f.key for f in self.fields}, rows)  # a column two fields read moves once

    def labels(self, table: pa.Table) -> tuple[pa.DictionaryArray, int]:
        """Each row's partition path (``name=value/...``) as a dictionary array (a batch has few
        partitions), and how many rows have a null value. The transforms run on distinct values
        only: a timestamp is first floored to its unit, so ``day(_ingest_time)`` formats one value
        per batch, not one per row; when every field's column holds one value and no null (a
        batch's ``_ingest_time``, a file's ``_event_time``), the label is made once, not per row."""
        if len(table) > 1 and all(_one_value(decoded(table.column(f.column))) for f in self.fields):
            one, _ = self.labels(table.slice(0, 1))
            zeros = pa.array(np.zeros(len(table), dtype=np.int32))
            return pa.DictionaryArray.from_arrays(zeros, one.dictionary.take(one.indices)), 0
        parts: list[pa.Array] = []
        nulls = pa.array(np.zeros(len(table), dtype=bool))
        for f in self.fields:
            values = decoded(table.column(f.column))
            if f.transform != "identity":
                values = pc.floor_temporal(values, unit=_UNITS[f.transform])
            encoded = pc.dictionary_encode(values)
            encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
            distinct = encoded.dictionary
            text = (
                _path_values(distinct.cast(pa.string()))
                if f.transform == "identity"
                else _format(distinct, f.transform)
            )
            named = pc.binary_join_element_wise(f"{f.path_name}=", text, "")
            # a null value (or one that did not convert) is the null partition: one more label
            named = pa.concat_arrays([named, pa.array([f"{f.path_name}={NULL}"])])
            missing = pc.is_null(encoded.indices)
            nulls = pc.or_(nulls, missing)
            parts.append(named.take(pc.fill_null(encoded.indices, len(distinct))))
        label = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "/")
        count = pc.sum(nulls).as_py() or 0
        return pc.dictionary_encode(label), int(count)


def _one_value(values: pa.Array | pa.ChunkedArray) -> bool:
    """Whether a column holds one value in every row (no null): one pass of min and max."""
    if values.null_count or pa.types.is_nested(values.type):
        return False
    bounds = pc.min_max(values)
    return bool(bounds["min"].is_valid and bounds["min"] == bounds["max"])


def path_value(text: str) -> str:
    """An identity partition's value as one segment of its files' path, the way Iceberg writes one
    (``PartitionSpec.partition_to_path``: ``quote_plus``, nothing kept but letters, digits and
    ``_.-~``), so that a value from a record can never add a directory (``a/b``), climb out of the
    table (``../..``), or exceed what a key or a file name may hold. The text ``null`` is written
    ``%6Eull`` (the unescaped ``null`` is the null partition's), ``.`` and ``..`` as ``%2E``s, and a value longer than
    PATH_VALUE_CHARS once encoded is cut and ends with ``!`` and 32 hex digits of its SHA-256 (``!``
    is never left unescaped otherwise). Different values never share a path: a file never mixes
    two partitions, whatever the records hold."""
    encoded = quote_plus(text, safe="")
    if encoded == NULL:
        return "%6E" + encoded[1:]
    if encoded in (".", ".."):  # a segment of its own too, even without the field's name before it
        return "%2E" * len(encoded)
    if len(encoded) <= PATH_VALUE_CHARS:
        return encoded
    head = encoded[:PATH_VALUE_HEAD]
    cut = head.rfind("%", len(head) - 2)  # never half an escape
    head = head[:cut] if cut >= 0 else head
    return f"{head}!{hashlib.sha256(text.encode()).hexdigest()[:HASH_HEX]}"


# What quote_plus leaves as it is; a value of only these (not "null", "." or "..") is its own segment.
_PLAIN = rf"^[A-Za-z0-9_.~-]{{1,{PATH_VALUE_CHARS}}}$"


def _path_values(values: pa.Array) -> pa.Array:
    """:func:`path_value` of each distinct value; the plain ones (most: ids, codes, regions) as they
    are, without a Python call each."""
    plain = pc.and_(pc.match_substring_regex(values, _PLAIN), pc.invert(pc.is_in(values, pa.array([NULL, ".", ".."]))))
    plain = pc.fill_null(plain, False)
    if pc.all(plain).as_py():
        return values
    return pa.array(
        [v if ok or v is None else path_value(v) for v, ok in zip(values.to_pylist(), plain.to_pylist(), strict=True)],
        pa.string(),
    )


def _to_extra(table: pa.Table, sources: dict[str, str], rows: pa.BooleanArray | None) -> pa.Table:
    """``table`` with the values of each column of ``sources`` (column -> key) in ``rows`` (all when
    None) moved to ``_extra`` under the key, as text, and the column NULL there. A map holds a key
    once (Trino refuses a row with two): a row whose ``_extra`` has the key already keeps its own.
    Only a lineage column can meet it there (a producer's own ``_event_time`` past the column
    bound), and the load history has that value again."""
    base = table.column(EXTRA).combine_chunks()
    texts = []
    for column, key in sources.items():
        text = _as_text(table.column(column).combine_chunks())
        if rows is not None:
            text = pc.if_else(rows, text, pa.nulls(len(text), text.type))
        if base.null_count < len(base):
            taken = pc.is_valid(pc.map_lookup(base, pa.scalar(key), "first"))
            text = pc.if_else(taken, pa.nulls(len(text), text.type), text)
        texts.append(text)
    extra = to_map(list(sources.values()), texts, len(table), base=base)
    for column in sources:
        i = table.column_names.index(column)
        null = pa.nulls(len(table), table.schema.field(i).type)
        table = table.set_column(i, column, null if rows is None else pc.if_else(rows, null, table.column(column)))
    return table.set_column(table.column_names.index(EXTRA), EXTRA, extra)


def _as_text(values: pa.Array) -> pa.Array:
    """A column's values as ``_extra`` holds values: strings as they are, times in ISO 8601 (UTC
    with ``Z``), numbers and booleans as JSON writes them."""
    if pa.types.is_timestamp(values.type):
        zone = values.type.tz
        text = pc.strftime(values, format="%Y-%m-%dT%H:%M:%S" + ("%z" if zone not in (None, "UTC") else ""))
        return pc.binary_join_element_wise(text, pa.scalar("Z"), "") if zone == "UTC" else text
    return values.cast(pa.string())


def _format(values: pa.Array, transform: str) -> pa.Array:
    """A time transform's text of each value (Iceberg's human form: 2026-11-23, 2026-11-23-07)."""
    if pa.types.is_date(values.type):
        values = values.cast(pa.timestamp("s"))
    return pc.strftime(values, format=TIME_TRANSFORMS[transform])


def parse_partition_by(text: str, declared: DeclaredSchema | None) -> PartitionPlan:
    """The plan of ``--partition_by``; a :class:`ConfigError` names a field that cannot be one."""
    fields = []
    for raw in (text or DEFAULT).split(","):
        m = _FIELD.match(raw)
        if not m:
            raise ConfigError(f"--partition_by: {raw.strip()!r} is not transform(column) or a column")
        transform, key = (m[1], m[2]) if m[1] else ("identity", m[3])
        if key not in LINEAGE_COLUMNS and not nameable(key):
            raise ConfigError(f"--partition_by: {key!r} cannot be a column of the table (contracts/column_names.py)")
        column = _column_of(key)
        if transform != "identity":
            kind = "timestamp" if key in TIME_COLUMNS else _declared_type(key, declared)
            if kind not in ("timestamp", "date"):
                had = f"{key!r} is declared {kind}" if kind else f"{key!r} is not declared"
                raise ConfigError(
                    f"--partition_by: {transform}({key}) needs a timestamp or date column and {had}: declare it "
                    "timestamp or date in --schema, or use _event_time/_ingest_time"
                )
        elif key not in LINEAGE_COLUMNS and _declared_type(key, declared) is None:
            # an undeclared key may be absent, misspelt or of any JSON type: every row would land in
            # the null partition, or in a partition per shape of value, with nothing said
            raise ConfigError(
                f"--partition_by: {key!r} is not a declared column: declare it (SCHEMA=types.json with "
                f'{{"columns": {{"{key}": "string"}}}}, or the table\'s columns: in a routing file), or partition by '
                "a lineage column (_ingest_time, _event_time)"
            )
        elif _declared_type(key, declared) == "double":
            # a file's partition is read from its Parquet min/max, which cannot say it: min is -0.0
            # whenever a zero is there (the Parquet spec), and NaN is left out
            raise ConfigError(
                f"--partition_by: identity({key}) of a double column cannot be read back from a file's "
                "statistics (0.0 reads as -0.0, NaN not at all): partition by a string, bigint or time column"
            )
        suffix = "" if transform == "identity" else f"_{transform}"
        name = "ingest_day" if (transform, key) == ("day", "_ingest_time") else f"{column}{suffix}"
        fields.append(Field(transform, key, column, name))
    _refuse_conflicts(fields)
    longest = sum(f.longest_segment + 1 for f in fields) - 1
    if longest > MAX_PARTITION_PATH:
        raise ConfigError(
            f"--partition_by: its partition path can take {longest} characters of a data file's key, more than "
            f"{MAX_PARTITION_PATH} (S3 keys hold 1,024 bytes): fewer identity fields, or shorter names"
        )
    return PartitionPlan(tuple(fields))


def _refuse_conflicts(fields: list[Field]) -> None:
    """What Iceberg refuses in a spec (pyiceberg's ``UpdateSpec.add_field``, as Java's): a field
    twice, two time fields of one column (``day(ts),month(ts)``), two fields of one name
    (``identity(ts_day),day(ts)``). Found at start-up, not at the first publication, where the share
    was refused three times and abandoned, every batch."""
    seen: set[tuple[str, str]] = set()
    timed: dict[str, str] = {}
    names: set[str] = set()
    for f in fields:
        spelled = f"{f.transform}({f.key})"
        if (f.transform, f.key) in seen:
            raise ConfigError(f"--partition_by: {spelled} is there twice")
        seen.add((f.transform, f.key))
        if f.transform != "identity":
            if f.key in timed:
                raise ConfigError(
                    f"--partition_by: {spelled} and {timed[f.key]}: Iceberg takes one time partition of a column"
                )
            timed[f.key] = spelled
        if f.name in names:
            raise ConfigError(f"--partition_by: two fields named {f.name!r} (a time field's name is <column>_<unit>)")
        names.add(f.name)


def _column_of(key: str) -> str:
    if key in LINEAGE_COLUMNS:
        return key
    return dict(column_names([key]))[key]


def _declared_type(key: str, declared: DeclaredSchema | None) -> str | None:
    column = declared.get(key) if declared is not None else None
    return column.type if column is not None else None
