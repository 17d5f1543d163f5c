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

:class:`CommitThrough` is the one way the job checks or adds to a commit (the batch guard, the
expiry's assertion on ``main``): a catalog in front of the table's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

from pyiceberg.catalog import Catalog
from pyiceberg.table import CommitTableResponse, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableRequirement, TableUpdate


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


class Head:
    """Whether a table's metadata in hand is where this process left it: the metadata its last
    commit returned (or the read before it), with no failure since. A commit built on it needs no
    refresh first: its requirement (``main`` at that snapshot, the schema, the columns) is checked
    by the catalog against the table as it is, and pyiceberg refreshes and rebuilds an append when
    another writer (a compaction) moved the head meanwhile. Any other state is read again first:
    the first commit of a run, anything after an error, a table whose metadata something else
    replaced. What it saves is one catalog read a commit: a Glue ``GetTable`` and the metadata's
    S3 GET on AWS, ~5 ms of parsing per 100 snapshots here."""

    def __init__(self) -> None:
        self._left: TableMetadata | None = None

    @contextlib.contextmanager
    def kept(self, table: Table, *, refresh: bool = False) -> Iterator[bool]:
        """Around a commit to ``table``: refresh it first unless it is as this process left it
        (``refresh``: always); yields whether it read it. Afterwards its metadata is as left,
        unless the block raised."""
        read = refresh or table.metadata is not self._left
        if read:
            table.refresh()
        self._left = None
        yield read
        self._left = table.metadata


def transaction(table: Table) -> Transaction:
    """A transaction on ``table`` (what ``table.transaction()`` returns, its metadata cached)."""
    return CachedTransaction(table)


class CommitThrough:
    """A catalog that commits through another one (everything else is that catalog's): subclasses
    check or add to a commit in ``commit_table`` before passing it on."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        return self._catalog.commit_table(table, requirements, updates)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)


def committing_through(table: Table, catalog: CommitThrough) -> Table:
    """The same table (metadata, FileIO), its commits going through ``catalog``."""
    return Table(table.name(), table.metadata, table.metadata_location, table.io, cast(Catalog, catalog))
