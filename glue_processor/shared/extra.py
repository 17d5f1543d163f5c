"""Keys past the column bound: one map column instead of a column each (pure: Arrow in, Arrow out).

Producers that use ids as keys would otherwise add a column per id: every later file wider, every
later parse slower. The table keeps at most ``max_columns`` data columns (the keys first seen win);
the values of any other key go to ``_extra``, a ``map<string, string>`` of key -> value with the
same value semantics as a column (strings unescaped, nested values compact JSON, numbers as
written). A row with nothing past the bound has ``_extra`` NULL; a JSON ``null`` is not kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

EXTRA = "_extra"
EXTRA_TYPE = pa.map_(pa.string(), pa.string())


def admit(
    keys: list[str],
    seen: set[str],
    found: Sequence[str],
    max_columns: int,
    joins: Callable[[str], bool] | None = None,
) -> list[str]:
    """Grow ``keys`` (and ``seen``) with the keys of ``found`` it has room for (and that ``joins``
    lets in: see ``names.StableNames``), in order; the rest: the keys of ``found`` that go to
    ``_extra``."""
    spill: list[str] = []
    for key in found:
        if key in seen:
            continue
        if len(keys) < max_columns and (joins is None or joins(key)):
            keys.append(key)
            seen.add(key)
        else:
            spill.append(key)
    return spill


def values_in(columns: Sequence[pa.Array]) -> int:
    """How many values ``columns`` hold (what folding them into ``_extra`` moves there)."""
    return sum(len(c) - c.null_count for c in columns)


def to_map(keys: Sequence[str], columns: Sequence[pa.Array], rows: int, base: pa.Array | None = None) -> pa.Array:
    """One ``_extra`` value per row from string ``columns`` (one per key, NULL where the row has no
    value), merged with the entries of ``base`` (an ``_extra`` column already made) after them."""
    row_parts: list[np.ndarray] = []
    key_parts: list[pa.Array] = []
    value_parts: list[pa.Array] = []
    if base is not None and base.null_count < len(base):
        base = base.combine_chunks() if isinstance(base, pa.ChunkedArray) else base
        offsets = np.asarray(base.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        counts = np.diff(offsets)
        counts[~np.asarray(base.is_valid().to_numpy(zero_copy_only=False), dtype=bool)] = 0
        start = int(offsets[0])
        row_parts.append(np.repeat(np.arange(rows, dtype=np.int64), counts))
        keep = _ranges(offsets[:-1] - start, counts)
        key_parts.append(base.keys.slice(start).take(pa.array(keep)).cast(pa.string()))
        value_parts.append(base.items.slice(start).take(pa.array(keep)).cast(pa.string()))
    for key, column in zip(keys, columns, strict=True):
        if column.null_count == len(column):
            continue
        present = np.flatnonzero(np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool))
        row_parts.append(present)
        key_parts.append(pa.array([key], pa.string()).take(pa.array(np.zeros(len(present), dtype=np.int64))))
        value_parts.append(column.take(pa.array(present)).cast(pa.string()))
    if not row_parts:
        return pa.nulls(rows, EXTRA_TYPE)
    owner = np.concatenate(row_parts)
    order = pa.array(np.argsort(owner, kind="stable"))
    counts = np.bincount(owner, minlength=rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    entries_keys = pa.concat_arrays(key_parts).take(order)
    entries_values = pa.concat_arrays(value_parts).take(order)
    empty = pa.array(counts == 0)
    return pa.MapArray.from_arrays(pa.array(offsets), entries_keys, entries_values, mask=empty)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The indices ``starts[i] .. starts[i] + counts[i]`` of every i, concatenated."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    shift = np.repeat(starts - (ends - counts), counts)
    result: np.ndarray = np.arange(total, dtype=np.int64) + shift
    return result
