"""Exactly-once publication of a micro-batch's files.

Protocol, per batch id of a streaming query:

1. If a commit record exists for (query id, batch id), the batch was committed by an earlier
   attempt: publish what the record lists (idempotent) and do nothing else.
2. Otherwise compute, and write every file under ``<root>/_staging/<query>/<batch>/<attempt>/``
   (a fresh attempt id: another run's attempt of the same batch is never touched). Readers skip
   names starting with ``_``, so staged files are invisible.
3. Create the commit record if none exists, atomically and exclusively (``If-None-Match: *`` on
   S3, ``link(2)`` locally): this is the commit point, and the fence. When another run created it
   first, this run has lost: it publishes nothing and stops (:class:`FencedOut`).
4. Publish, through the sink (:mod:`glue_processor.table`): the Iceberg sink appends the batch's
   files (written in place under the table) as one snapshot, unless the table has it already; the
   hive-parquet sink moves each staged file to its final, deterministic name (a move whose target
   exists was done before a crash). Quarantine files move to theirs. Then the batch's staging
   directory goes (the attempts of killed or fenced runs included). A publication that fails is
   retried (:mod:`glue_processor.commit.publication`); a batch the table refuses for its own content is
   *abandoned*: a marker beside its record says so, and a replay publishes nothing.

Spark's own checkpoint commit happens only after ``foreachBatch`` returns, so a crash anywhere
leads to a re-run of the same batch id with the same manifests: before step 3 it recomputes
from scratch, after it only finishes publishing. A reader never sees a killed attempt's files.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from contracts.exceptions import FencedOut
from contracts.layout import COMMITS_DIR, STAGING_DIR, is_commit_record
from contracts.ledger import CommitRecord
from glue_processor import faults
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.read.objects import ObjectStore, store_for
from glue_processor.table.hive import HiveSink, move_all
from glue_processor.table.sink import Sink

logger = logging.getLogger(__name__)


class BatchCommitter:
    """Staging, commit records and publication for one streaming query."""

    def __init__(
        self,
        fs: HadoopFS,
        *,
        output_uri: str,
        quarantine_uri: str,
        query_id: str,
        sink: Sink | None = None,
        stores: Callable[[str], ObjectStore] = store_for,
    ) -> None:
        self.fs = fs
        self.sink: Sink = sink if sink is not None else HiveSink(fs, output_uri)
        self.stores = stores
        self.output_uri = output_uri
        self.quarantine_uri = quarantine_uri
        self.query_id = query_id

    def commits_dir(self) -> str:
        return f"{self.output_uri}/{COMMITS_DIR}/{self.query_id}"

    def record_uri(self, batch_id: int) -> str:
        return f"{self.commits_dir()}/{batch_id:012d}.json"

    def staging_uri(self, root: str, batch_id: int, attempt: str) -> str:
        return f"{root}/{STAGING_DIR}/{self.query_id}/{batch_id:012d}/{attempt}"

    def load(self, batch_id: int) -> CommitRecord | None:
        uri = self.record_uri(batch_id)
        if not self.fs.exists(uri):
            return None
        return CommitRecord.model_validate_json(self.fs.read_bytes(uri))

    def discard_staging(self, batch_id: int) -> None:
        """Remove what killed attempts of this batch left behind."""
        for root in (self.output_uri, self.quarantine_uri):
            self.fs.delete(f"{root}/{STAGING_DIR}/{self.query_id}/{batch_id:012d}")

    def commit(self, record: CommitRecord) -> None:
        """Create the commit record (the commit point), unless another run did (:class:`FencedOut`).
        The batch is published next (:meth:`publish`)."""
        uri = self.record_uri(record.batch_id)
        if not self.stores(uri).create_exclusive(uri, record.model_dump_json(indent=1).encode()):
            existing = self.load(record.batch_id)
            if existing is None or existing.attempt != record.attempt:
                winner = existing.attempt if existing else "unknown"
                self._discard_own(record)
                raise FencedOut(
                    f"batch {record.batch_id} of query {self.query_id} was committed by another run "
                    f"(attempt {winner}); attempt {record.attempt} publishes nothing and stops"
                )
        faults.hit("after-commit-record")
        logger.info("batch committed", extra={"batch_id": record.batch_id, "record": self.record_uri(record.batch_id)})

    def published_uri(self, batch_id: int) -> str:
        """The marker of a batch whose data files the sink has published (not a record: no .json)."""
        return f"{self.commits_dir()}/{batch_id:012d}.published"

    def publish(self, record: CommitRecord, footers: Mapping[str, bytes] | None = None) -> int | None:
        """Make the record's files visible; safe to repeat after a crash. Once the sink has published
        the data, a marker says so: a replay, however late (after the table expired the batch's
        snapshot, which is how a replay knows the batch is in), does not publish it again."""
        marker = self.published_uri(record.batch_id)
        if self.fs.exists(marker):
            snapshot = int(self.fs.read_bytes(marker) or 0) or None
        else:
            snapshot = self.sink.publish(record, footers)
            self.fs.write_bytes(marker, str(snapshot or "").encode())
        move_all(self.fs, record.quarantine_files)
        self.discard_staging(record.batch_id)
        self._discard_attempts(record.batch_id, keep=record.attempt)
        return snapshot

    def abandoned_uri(self, batch_id: int) -> str:
        """The marker of a committed batch that will never be published (not a record: no .json)."""
        return f"{self.commits_dir()}/{batch_id:012d}.abandoned"

    def abandoned(self, batch_id: int) -> bool:
        return self.fs.exists(self.abandoned_uri(batch_id))

    def abandon(self, record: CommitRecord, reason: str) -> None:
        """Mark a committed batch as never to be published (the table refused its content), and
        remove its data files (never in the table) and its staging."""
        self.fs.write_bytes(self.abandoned_uri(record.batch_id), reason.encode())
        self._discard_own(record)
        self.discard_staging(record.batch_id)
        self._discard_attempts(record.batch_id, keep=None)
        logger.error("batch abandoned", extra={"batch_id": record.batch_id, "reason": reason})

    def _discard_attempts(self, batch_id: int, *, keep: str | None) -> None:
        """Files that killed or fenced attempts of the batch wrote in place under the table."""
        self.sink.discard_attempts(self.fs, self.query_id, batch_id, keep=keep)

    def _discard_own(self, record: CommitRecord) -> None:
        """A fenced attempt's files written in place are never committed: remove them now rather than
        leave them to orphan-file clean-up."""
        if not self.sink.in_place:
            return
        for item in record.data_files:
            try:
                self.fs.delete(item.final)
            except Exception:  # noqa: BLE001 - best effort: orphan clean-up removes it later
                logger.warning("could not remove a fenced attempt's file", extra={"uri": item.final})

    def recent_records(self, *, since: datetime) -> list[CommitRecord]:
        """Commit records newer than ``since`` of batches that were not abandoned, in batch order;
        reads back from the newest only as far as needed, so a restart does not read the whole
        ledger."""
        listing = self.fs.list(self.commits_dir())
        names = sorted((i for i in listing if is_commit_record(i.name)), key=lambda i: i.name)
        abandoned = {i.name.removesuffix(".abandoned") for i in listing if i.name.endswith(".abandoned")}
        out: list[CommitRecord] = []
        for info in reversed(names):
            record = CommitRecord.model_validate_json(self.fs.read_bytes(info.uri))
            if record.committed_at < since:
                break
            if info.name.removesuffix(".json") not in abandoned:  # its objects were never loaded
                out.append(record)
        return list(reversed(out))

    def recent_records_all(self, *, since: datetime) -> list[CommitRecord]:
        """Recent commit records of every query (checkpoint generation), oldest first."""
        out: list[CommitRecord] = []
        for info in self.fs.list(f"{self.output_uri}/{COMMITS_DIR}"):
            if info.is_dir:
                peer = BatchCommitter(
                    self.fs, output_uri=self.output_uri, quarantine_uri=self.quarantine_uri, query_id=info.name
                )
                out.extend(peer.recent_records(since=since))
        return sorted(out, key=lambda r: r.committed_at)
