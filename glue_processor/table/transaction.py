"""A pyiceberg transaction whose staged metadata is worked out once per staged state.

pyiceberg 0.12's ``Transaction.table_metadata`` replays every staged update on the table's metadata
and returns a deep copy, on every read; one append reads it ~16 times, so a commit deep-copied the
whole snapshot list ~17 times: 0.7 ms per snapshot the table keeps, per commit (300 ms at 400
snapshots; ``make bench-commits``). Upstream approved the same cache (apache/iceberg-python#3302,
carried on as #3784) but it is in no release yet. The cache is keyed on the identity of the two
inputs: ``_updates`` is a tuple rebound on every staged update and ``Table.metadata`` is replaced on
every refresh or commit, so either change recomputes it; the value is the one pyiceberg computes
(with nothing staged, the table's metadata itself: pyiceberg's models are frozen).
``tests/glue_processor/table/test_transaction.py`` checks both against the installed pyiceberg, so
an upgrade that changes them fails there first.
"""

from __future__ import annotations

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableUpdate


class CachedTransaction(Transaction):
    """``Transaction`` with its ``table_metadata`` computed once per (table metadata, updates)."""

    _cache: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        if not updates:  # nothing staged: the table's own metadata (pydantic models pyiceberg freezes)
            return base
        cache = self._cache
        if cache is None or cache[0] is not base or cache[1] is not updates:
            cache = (base, updates, super().table_metadata)
            self._cache = cache
        return cache[2]


def transaction(table: Table) -> Transaction:
    """A transaction on ``table`` (what ``table.transaction()`` returns, its metadata cached)."""
    return CachedTransaction(table)
