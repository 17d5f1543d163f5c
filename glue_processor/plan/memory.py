"""What the job remembers between batches: the keys each table knows (its columns), the object
versions it ingested (the dedupe window), what gzip expands to. Resumed after a restart from a
snapshot and the commit records written after it, so a restart reads a bounded number of records
whatever the history's length."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Protocol

from contracts.ledger import CommitRecord, TableShare
from glue_processor.plan.dedupe import DedupeIndex, load_snapshot, save_snapshot
from glue_processor.plan.routes import Routes, TableConfig
from glue_processor.plan.sizing import LearnedRatio
from glue_processor.settings import JobSettings
from glue_processor.shared.names import LINEAGE_COLUMNS, nameable

GZIP_EXPANSION_PRIOR = 5.0
# The dedupe index is saved every this many batches; a restart replays at most that many records.
DEDUPE_SNAPSHOT_BATCHES = 60
LOADED = ("ingested", "empty")


class Records(Protocol):
    """What a resume reads of the batches before it: the commit records and their publication
    (``commit.ledger.BatchCommitter`` is one; the plan names no later stage)."""

    query_id: str

    def recent_records_all(self, *, since: datetime) -> list[CommitRecord]: ...

    def abandoned_all(self, *, since: datetime) -> list[tuple[CommitRecord, TableShare]]: ...

    def published(self, record: CommitRecord, share: TableShare) -> tuple[bool, int | None]: ...


def initial_keys(config: TableConfig) -> set[str]:
    """A table's columns before any batch: its declared columns and its partitions' sources, bound
    or not."""
    keys = set(config.declared.keys) if config.declared is not None else set()
    if config.partitions is not None:
        keys.update(f.key for f in config.partitions.fields if f.key not in LINEAGE_COLUMNS)
    return keys


class Memory:
    def __init__(self, settings: JobSettings, routes: Routes) -> None:
        self.settings, self.routes = settings, routes
        # Every JSON key seen so far per table, and so the columns of its shares (a schema only grows).
        self.keys: dict[str, set[str]] = {name: initial_keys(c) for name, c in routes.tables.items()}
        # The keys of each table's shares set aside (published later, or abandoned) that it did not
        # know, per share: no later share takes another case of one for a column (see held_keys).
        self.held: dict[str, Held] = {}
        # Object versions ingested within the dedupe window, compactly (see glue_processor/plan/dedupe.py).
        self.ingested = DedupeIndex()
        # Decompressed bytes per gzip byte, to size the tasks of a batch before reading it.
        self.gzip_expansion = LearnedRatio(GZIP_EXPANSION_PRIOR)
        self._since_snapshot = 0

    def keys_of(self, table: str) -> set[str]:
        """The keys a table knows (a table the routing no longer names: what its records said)."""
        return self.keys.setdefault(self.routes.name(table), set())

    def held_keys(self, table: str) -> set[str]:
        """The keys of ``table``'s shares set aside that it does not know. A share set aside is often
        published after later ones: had a later share taken ``Kind`` for a column, the share set
        aside would then add ``kind``, and a case-insensitive catalog (Glue) refuses the two side by
        side, so it would never go in. A later share's row with that very key still makes it a
        column (the same one); another case of it goes to ``_extra``. Held keys are not columns of
        shares whose rows lack them, so a share set aside that is refused for its content never
        passes its keys on."""
        held = self.held.get(self.routes.name(table))
        return held.keys() - self.keys_of(table) if held else set()

    def hold(self, table: str, share: tuple[str, int], keys: Collection[str]) -> None:
        """A share of ``table`` (``(query id, batch id)``) was set aside, or is being published
        again after a restart, with these keys (those the table knows are not kept)."""
        known = self.keys_of(table)
        new = tuple(sorted(k for k in keys if nameable(k) and k not in known))
        self.held.setdefault(self.routes.name(table), Held()).add(share, new)

    def holds(self, table: str, share: tuple[str, int]) -> bool:
        held = self.held.get(self.routes.name(table))
        return held is not None and share in held.shares

    def release(self, table: str, share: tuple[str, int]) -> None:
        """A share held was published (its keys are learnt) or abandoned (they teach nothing)."""
        held = self.held.get(self.routes.name(table))
        if held is not None:
            held.remove(share)

    @property
    def known_keys(self) -> set[str]:
        """The keys of the job's own table (--table_name): the one table without a routing file."""
        return self.keys_of(self.routes.legacy)

    @known_keys.setter
    def known_keys(self, keys: set[str]) -> None:
        self.keys[self.routes.legacy] = keys

    def resume(
        self, committer: Records, *, set_aside: Collection[tuple[str, int, str]] | None = None
    ) -> CommitRecord | None:
        """Learn from the recent batches (keys, dedupe index); the latest record, if any. A share
        still ``set_aside`` (``(query id, batch id, table)``) teaches nothing yet: its keys are held
        (:meth:`hold`) until it settles (those set aside before the snapshot: see the job's resume)."""
        since = self._window_start()
        snapshot = load_snapshot(self.settings.output_uri)
        if snapshot is not None:
            self.ingested, known, taken_at = snapshot
            for table, keys in known.items():
                self.keys_of(table).update(k for k in keys if nameable(k))
            self.ingested.expire(since)
            # every record after the snapshot, however old (a pause longer than the dedupe window):
            # the keys they taught are columns; the dedupe index forgets what is past the window as
            # they are replayed. There are fewer than DEDUPE_SNAPSHOT_BATCHES: the count toward the
            # next snapshot goes on across runs (below)
            since = taken_at + timedelta(microseconds=1)
        # every generation's records: an object ingested before a checkpoint rotation is still known
        records = committer.recent_records_all(since=since)
        self._since_snapshot = len(records)  # runs shorter than a snapshot's batches still snapshot
        # a share abandoned after the snapshot remembered its objects: forgotten again (its marker is
        # the durable truth; the snapshot may predate it)
        for record, share in committer.abandoned_all(since=self._window_start()):
            self.forget(record, share)
        for record in records:
            self.remember(record)
            # a key that cannot name a column (recorded before names were checked) is not one any more;
            # a share refused or abandoned (recent_records marks it so) taught nothing
            for share in record.tables:
                if share.refused is not None:
                    continue
                if (record.query_id, record.batch_id, share.table) in (set_aside or ()) or (
                    record is records[-1] and not _published(committer, record, share)
                ):
                    # set aside, or committed and not yet published (the job stopped in between:
                    # the stream replays the batch, which publishes it or sets it aside)
                    self.hold(share.table, (record.query_id, record.batch_id), share.keys)
                else:
                    self.learn(share.table, share.keys)
        return records[-1] if records else None

    def learn(self, table: str, keys: Collection[str]) -> None:
        """A table's share was published: its keys are the table's columns."""
        self.keys_of(table).update(k for k in keys if nameable(k))

    def forget(self, record: CommitRecord, share: TableShare) -> None:
        """A share was abandoned after the batch was remembered: its objects were never loaded."""
        identities = [(s.bucket, s.key, s.etag) for s in record.loaded_by(share)]
        self.ingested.forget(record.batch_id, identities)

    def remember(self, record: CommitRecord, *, abandoned: Collection[str] = ()) -> None:
        """Index the object versions a batch ingested, for the dedupe window (not those of the
        tables whose share was ``abandoned``: a requeue must load them)."""
        loaded = [
            (s.bucket, s.key, s.etag) for s in record.sources if s.status in LOADED and (s.table or "") not in abandoned
        ]
        self.ingested.add_batch(record.batch_id, record.committed_at, loaded)
        self.ingested.expire(self._window_start())

    def published(self, record: CommitRecord, *, abandoned: Collection[str] = ()) -> None:
        """A batch was published: remember it, and snapshot the memory every so many batches."""
        self.remember(record, abandoned=abandoned)
        self._since_snapshot += 1
        if self._since_snapshot >= DEDUPE_SNAPSHOT_BATCHES:
            self._since_snapshot = 0
            save_snapshot(self.settings.output_uri, self.ingested, self.keys, at=record.committed_at)

    def _window_start(self) -> datetime:
        return datetime.now(UTC) - timedelta(hours=self.settings.dedupe_window_hours)


def _published(committer: Records, record: CommitRecord, share: TableShare) -> bool:
    """The share's publication marker is there (a record of another generation: taken as done, the
    stream replays only its own query's batches)."""
    return record.query_id != committer.query_id or committer.published(record, share)[0]


class Held:
    """The keys one table's shares hold: per share (to release it), counted per key (their union
    without a walk over every share), each distinct key set stored once however many shares bring
    it (a table out of reach for a day sets ~2,880 shares aside, mostly with the same keys)."""

    def __init__(self) -> None:
        self.shares: dict[tuple[str, int], tuple[str, ...]] = {}
        self._count: Counter[str] = Counter()
        self._sets: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._uses: Counter[tuple[str, ...]] = Counter()

    def add(self, share: tuple[str, int], keys: tuple[str, ...]) -> None:
        self.remove(share)
        keys = self._sets.setdefault(keys, keys)
        self._uses[keys] += 1
        self.shares[share] = keys
        self._count.update(keys)

    def remove(self, share: tuple[str, int]) -> None:
        keys = self.shares.pop(share, None)
        if keys is None:
            return
        self._count.subtract(keys)
        for key in keys:
            if self._count[key] <= 0:
                del self._count[key]
        self._uses[keys] -= 1
        if self._uses[keys] <= 0:
            del self._uses[keys], self._sets[keys]

    def keys(self) -> set[str]:
        return set(self._count)
