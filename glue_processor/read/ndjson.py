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

from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import ndjson_arrow
import pyarrow as pa

from contracts.column_names import fit, valid_column_name
from glue_processor.read.extra import EXTRA_TYPE, to_map

if TYPE_CHECKING:
    from ndjson_arrow._scan import Column, Extra

# Lineage columns added to every output row. Data fields with the same names are renamed.
LINEAGE_COLUMNS = ("_source_uri", "_source_etag", "_line", "_event_time", "_batch_id", "_ingest_time")
# Other columns of the job's own: keys past the column bound, and declared values that did not convert.
RESERVED_COLUMNS = (*LINEAGE_COLUMNS, "_extra", "_rescued")
# The fields inside those two maps: Iceberg indexes a schema's names with nested ones spelled out, so
# a column named so is refused ("Cannot add column, name already exists: _extra.key"), and with it
# every object of its batch's share; and a Parquet column named as a map's leaf path shares its field
# id in the file's statistics (its counts then add up the map's). A key of any of these names is no column.
NESTED_NAMES = tuple(
    f"{column}.{path}"
    for column in ("_extra", "_rescued")
    for path in ("key", "value", "key_value", "key_value.key", "key_value.value")
)

REASON_NOT_UTF8 = "line is not valid UTF-8"
REASON_TRAILING = "trailing content after the JSON object"
REASON_ARRAY = "line is a JSON array, expected an object"
REASON_SCALAR = "line is a JSON scalar, expected an object"
REASON_MALFORMED = "malformed JSON"
REASON_TOO_DEEP = f"JSON nested deeper than {ndjson_arrow.MAX_DEPTH} levels"
REASON_TOO_MANY_KEYS = f"more than {ndjson_arrow.MAX_LINE_KEYS} distinct keys in one object"
_REASONS = {
    ndjson_arrow.NOT_UTF8: REASON_NOT_UTF8,
    ndjson_arrow.TRAILING: REASON_TRAILING,
    ndjson_arrow.ARRAY: REASON_ARRAY,
    ndjson_arrow.SCALAR: REASON_SCALAR,
    ndjson_arrow.MALFORMED: REASON_MALFORMED,
    ndjson_arrow.TOO_DEEP: REASON_TOO_DEEP,
    ndjson_arrow.TOO_MANY_KEYS: REASON_TOO_MANY_KEYS,
}
# The most cells (rows x columns: an offset each, 4 bytes, and a validity bit) a scan holds, and so
# a chunk's columns at most ~150 MB, whatever its rows and the columns known (see tasks.MEMORY).
MAX_CELLS = 32 * 1024 * 1024
LINE = pa.int64()

STRING = pa.string()


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


def nameable(key: str) -> bool:
    """True when a key can be a column (its name valid as it is and not a field of the job's maps,
    :data:`NESTED_NAMES`; the empty key is ``_empty_key``)."""
    return key == "" or (valid_column_name(key) and key not in NESTED_NAMES)


def column_names(keys: Sequence[str]) -> list[tuple[str, str]]:
    """Map JSON keys to Parquet column names, deterministically.

    Engines such as Athena and Spark (by default) resolve column names case-insensitively, so
    keys that differ only by case, or that collide with a column of the job's own, get a suffix
    ``__2``, ``__3``... in sorted order (the key cut short when that would make the name too long
    for :mod:`contracts.column_names`). An empty key becomes ``_empty_key``.

    Linear in the keys, whatever they are: a key would try every suffix the keys before it took of
    the same name (281 case variants of a 100-character key took 1.85 s a naming, and the driver names
    a table's keys several times a batch; 3,000 128-character keys that the cut makes alike, 63 s).
    Suffixed names are the same, lower-cased, for every key whose cut name is (its *stem*, with the
    suffix's digits as zeros: digits neither case nor change a cut), so each key starts past the last
    suffix a key of its stem found taken.
    """
    taken = {name.lower() for name in RESERVED_COLUMNS}
    tried: dict[str, int] = {}  # a stem -> the last suffix found taken (names only get taken)
    mapping: list[tuple[str, str]] = []
    for key in sorted(set(keys)):
        name = base = key if key else "_empty_key"
        n = 1
        while name.lower() in taken:
            n += 1
            digits = len(str(n))
            stem = fit(base, "__" + "0" * digits).lower()
            n = max(n, tried.get(stem, 0) + 1)
            if len(str(n)) != digits:
                n -= 1  # past this many digits: the next turn takes the stem of the longer suffixes
                continue
            name = fit(base, f"__{n}")
            tried[stem] = n
        taken.add(name.lower())
        mapping.append((key, name))
    return sorted(mapping, key=lambda kv: (kv[1].lower(), kv[1]))


class StableNames:
    """Which new keys may become columns without renaming one: :func:`column_names` names a set of
    keys, so a key joining the set may move the names of keys already in it (a known ``kind__2`` is
    named ``kind__2__2`` once ``kind`` and ``Kind`` come, and ``kind``'s values would land in the
    table's column ``kind__2``).

    Two sets are named: the batch's (``known`` and the keys admitted), which its files are written
    with, and the same with the keys ``held`` for the table's shares set aside, which the table will
    have once those are published. A new key joins only when, in both, every known key keeps its
    name, a held key keeps the name its share gives it, every admitted key has the same name (what is
    written now is what the table will call it), and no key that is not held takes a held key's name
    or another case of it.

    A key whose name is free in both (no key is named as it, nor a column of the job's own, nor a
    held key) joins at once: nothing moves. Any other is checked by naming both sets again, within
    ``CHECK_KEYS`` keys named a batch (at most ~1 s, for 128-character keys that all need a suffix; a
    file of thousands of case variants costs no more);
    past that, such keys are refused. A refused key's values stay in ``_extra`` under their own key."""

    CHECK_KEYS = 20_000

    def __init__(self, known: Collection[str], held: Collection[str] = ()) -> None:
        self._final = sorted(set(known))  # what the batch's columns are named by: known, then admitted
        self._held_keys = sorted(set(held) - set(known))
        full = dict(column_names((*self._final, *self._held_keys)))
        table = dict(column_names(self._final))
        # a known key whose name the held keys would move already: none of them may move at all
        self._known = {k: table[k] if table[k] == full[k] else "" for k in self._final}
        self._held = {k: full[k] for k in self._held_keys}
        # the names no key but a held one may take: a held key's name, and another case of the key
        self._fenced = {n.lower() for n in self._held.values()} | {k.lower() for k in self._held}
        self._taken = _lowered(table.values(), full.values(), self._fenced)
        self._refused: set[str] = set()
        self.checks = self.named = 0

    def join(self, key: str) -> bool:
        """True, and ``key`` is one of the batch's keys, when it moves no name (see the class)."""
        if key in self._refused:
            return False
        base = (key or "_empty_key").lower()
        if key not in self._held and base not in self._taken:
            self._final.append(key)
            self._taken.add(base)
            return True
        cost = 2 * len(self._final) + len(self._held) + 2
        if self.named + cost <= self.CHECK_KEYS:
            self.checks += 1
            self.named += cost
            final = dict(column_names((*self._final, key)))
            full = dict(column_names((*self._final, *self._held_keys, key)))
            if self._keeps(final, full):
                self._final.append(key)
                self._taken = _lowered(final.values(), full.values(), self._fenced)
                return True
        self._refused.add(key)
        return False

    def _keeps(self, final: dict[str, str], full: dict[str, str]) -> bool:
        for k, name in final.items():
            if full[k] != name or name != self._known.get(k, self._held.get(k, name)):
                return False
            if k not in self._known and k not in self._held and name.lower() in self._fenced:
                return False
        return all(full[k] == name for k, name in self._held.items())


def _lowered(*names: Iterable[str]) -> set[str]:
    return {n.lower() for group in (*names, RESERVED_COLUMNS) for n in group}


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
