"""What the job remembers between batches: the keys it knows (the table's columns), the object
versions it ingested (the dedupe window), what gzip expands to. Resumed after a restart from a
snapshot and the commit records written after it, so a restart reads a bounded number of records
whatever the history's length."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contracts.ledger import CommitRecord
from glue_processor.commit.ledger import BatchCommitter
from glue_processor.plan.dedupe import DedupeIndex, load_snapshot, save_snapshot
from glue_processor.plan.sizing import LearnedRatio
from glue_processor.read.ndjson import LINEAGE_COLUMNS, nameable
from glue_processor.settings import JobSettings
from glue_processor.table.declared import DeclaredSchema
from glue_processor.table.partitioning import PartitionPlan

GZIP_EXPANSION_PRIOR = 5.0
# The dedupe index is saved every this many batches; a restart replays at most that many records.
DEDUPE_SNAPSHOT_BATCHES = 60


class Memory:
    def __init__(
        self, settings: JobSettings, declared: DeclaredSchema | None, partitions: PartitionPlan | None
    ) -> None:
        self.settings = settings
        # Every JSON key seen so far, and so the columns of a batch (the schema only grows). The
        # declared columns and a partition's source are columns from the start, bound or not.
        self.known_keys: set[str] = set(declared.keys) if declared is not None else set()
        if partitions is not None:
            self.known_keys.update(f.key for f in partitions.fields if f.key not in LINEAGE_COLUMNS)
        # Object versions ingested within the dedupe window, compactly (see glue_processor/plan/dedupe.py).
        self.ingested = DedupeIndex()
        # Decompressed bytes per gzip byte, to size the tasks of a batch before reading it.
        self.gzip_expansion = LearnedRatio(GZIP_EXPANSION_PRIOR)
        self._since_snapshot = 0

    def resume(self, committer: BatchCommitter) -> CommitRecord | None:
        """Learn from the recent batches (keys, dedupe index); the latest record, if any."""
        since = self._window_start()
        snapshot = load_snapshot(self.settings.output_uri)
        if snapshot is not None:
            self.ingested, known, taken_at = snapshot
            self.known_keys |= {k for k in known if nameable(k)}
            self.ingested.expire(since)
            since = max(since, taken_at + timedelta(microseconds=1))
        # every generation's records: an object ingested before a checkpoint rotation is still known
        records = committer.recent_records_all(since=since)
        for record in records:
            self.remember(record)
        if not records:
            return None
        # a key that cannot name a column (recorded before names were checked) is not one any more
        self.known_keys.update(k for k in records[-1].keys if nameable(k))
        return records[-1]

    def remember(self, record: CommitRecord) -> None:
        """Index the object versions a batch ingested, for the dedupe window."""
        loaded = [(s.bucket, s.key, s.etag) for s in record.sources if s.status in ("ingested", "empty")]
        self.ingested.add_batch(record.batch_id, record.committed_at, loaded)
        self.ingested.expire(self._window_start())

    def published(self, record: CommitRecord) -> None:
        """A batch was published: remember it, and snapshot the memory every so many batches."""
        self.remember(record)
        self._since_snapshot += 1
        if self._since_snapshot >= DEDUPE_SNAPSHOT_BATCHES:
            self._since_snapshot = 0
            save_snapshot(self.settings.output_uri, self.ingested, self.known_keys, at=record.committed_at)

    def _window_start(self) -> datetime:
        return datetime.now(UTC) - timedelta(hours=self.settings.dedupe_window_hours)
