"""What a JSON key is called as a column: the job's own columns, which keys can be columns at all,
the names of a set of keys, and which new keys may join a table's without moving a name.

Names are a function of a set of keys (:func:`column_names`: keys that differ only by case, or that
collide with a column of the job's own, get a suffix in sorted order), so every stage that writes or
registers columns works them out alike from the keys alone; :class:`StableNames` keeps a table's
names fixed as keys join it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import pyarrow as pa

from contracts.column_names import fit, valid_column_name

# Every time the job writes: microseconds, UTC (Iceberg's timestamptz).
STRING = pa.string()
TIMESTAMP = pa.timestamp("us", tz="UTC")
# Lineage columns added to every output row, with their types: the tasks write them so, rules read
# them so, and the table's schema is made from them (glue_processor/table/schema.py). Data fields
# with the same names are renamed. A task holds each object's strings as a dictionary of one value
# (see decoded).
LINEAGE_TYPES: dict[str, pa.DataType] = {
    "_source_uri": pa.string(),
    "_source_etag": pa.string(),
    "_line": pa.int64(),
    "_event_time": TIMESTAMP,
    "_batch_id": pa.int64(),
    "_ingest_time": TIMESTAMP,
}
LINEAGE_COLUMNS = tuple(LINEAGE_TYPES)


def decoded(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A column's values in their own type. A parse task holds an object's ``_source_uri`` and
    ``_source_etag`` as a dictionary of that one value (no copy a row; Arrow's writer encodes its
    indices as they are, and the file holds strings); code that computes on the values (rules,
    partition labels) takes them decoded, since many of Arrow's functions take no dictionary."""
    return values.cast(values.type.value_type) if pa.types.is_dictionary(values.type) else values


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


def nameable(key: str) -> bool:
    """True when a key can be a column (its name valid as it is and not a field of the job's maps,
    :data:`NESTED_NAMES`, in any case: Iceberg's Java index by lower-case name, which Spark binds
    filters through by default, would keep one of ``_Extra.Key`` and the map's key field; the empty
    key is ``_empty_key``)."""
    return key == "" or (valid_column_name(key) and key.lower() not in NESTED_NAMES)


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
    file of thousands of case variants costs no more); past that, such keys are refused. A refused
    key's values stay in ``_extra`` under their own key."""

    CHECK_KEYS = 20_000

    def __init__(self, known: Collection[str], held: Collection[str] = ()) -> None:
        self._final = sorted(set(known))  # what the batch's columns are named by: known, then admitted
        held_keys = set(held) - set(known)
        full = dict(column_names((*self._final, *held_keys)))
        table = dict(column_names(self._final))
        # a known key whose name the held keys would move already: none of them may move at all
        self._known = {k: table[k] if table[k] == full[k] else "" for k in self._final}
        self._held = {k: full[k] for k in held_keys}  # a held key -> the name its share gives it
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
            full = dict(column_names((*self._final, *self._held, key)))
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
