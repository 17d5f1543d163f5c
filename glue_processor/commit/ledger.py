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
4. Publish each table's share through its sink (:mod:`glue_processor.table`): the Iceberg sink
   appends the share's files (written in place under the table) as one snapshot, unless the table
   has it already; the hive-parquet sink moves each staged file to its final, deterministic name (a
   move whose target exists was done before a crash). A marker beside the record says a share is
   published (``<batch>.<table>.published``). Quarantine files move to theirs. Then the batch's
   staging directory goes (the attempts of killed or fenced runs included). A publication that fails
   is retried (:mod:`glue_processor.commit.publication`), and set aside after a while so the other
   tables go on (:mod:`glue_processor.commit.deferred`); a share the table refuses for its own
   content is *abandoned*: a marker says so (``<batch>.<table>.abandoned``; a whole batch's, from
   before routing: ``<batch>.abandoned``), and a replay publishes nothing of it.

Spark's own checkpoint commit happens only after ``foreachBatch`` returns, so a crash anywhere
leads to a re-run of the same batch id with the same manifests: before step 3 it recomputes
from scratch, after it only finishes publishing. A reader never sees a killed attempt's files.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from contracts.exceptions import FencedOut
from contracts.layout import COMMITS_DIR, STAGING_DIR, is_commit_record
from contracts.ledger import CommitRecord, TableShare, record_json
from glue_processor import faults
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.shared.objects import ObjectStore, store_for
from glue_processor.table.hive import move_all

if TYPE_CHECKING:
    from glue_processor.table.datafiles import WrittenFile
    from glue_processor.table.sink import Tables

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
        tables: Tables | None = None,
        stores: Callable[[str], ObjectStore] = store_for,
    ) -> None:
        self.fs = fs
        self.tables = tables  # the sinks (None: the ledger is only read)
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
        if not self.stores(uri).create_exclusive(uri, record_json(record)):
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

    def marker_uri(self, batch_id: int, table: str, kind: str) -> str:
        """A share's marker (``published``, ``abandoned``, ``deferred``; not a record: no .json);
        a version 1 record's share (table "") has the batch's own."""
        return f"{self.commits_dir()}/{batch_id:012d}{'.' + table if table else ''}.{kind}"

    def published(self, record: CommitRecord, share: TableShare) -> tuple[bool, int | None]:
        """(True, its snapshot id) when the share was published before."""
        for uri in self._markers(record, share, "published"):
            if self.fs.exists(uri):
                return True, int(self.fs.read_bytes(uri) or 0) or None
        return False, None

    def publish_share(
        self, record: CommitRecord, share: TableShare, written_files: Mapping[str, WrittenFile] | None = None
    ) -> int | None:
        """Make the share's files visible; safe to repeat after a crash. Once its sink has published
        it, a marker says so: a replay, however late (after the table expired the batch's snapshot,
        which is how a replay knows the batch is in), does not publish it again."""
        done, snapshot = self.published(record, share)
        if done:
            return snapshot
        snapshot = self._tables().sink(share.table).publish(record, share, written_files)
        self.fs.write_bytes(self.marker_uri(record.batch_id, share.table, "published"), str(snapshot or "").encode())
        return snapshot

    def settle(self, record: CommitRecord) -> None:
        """After its shares are published (or set aside, or abandoned): the quarantine files in
        place, the staging and the other attempts' files gone."""
        move_all(self.fs, record.quarantine_files)
        self.discard_staging(record.batch_id)
        for share in record.tables:
            self._tables().sink(share.table).discard_attempts(
                self.fs, self.query_id, record.batch_id, keep=record.attempt
            )

    def abandoned(self, batch_id: int) -> bool:
        """The whole batch was abandoned (a record from before routing; see :meth:`share_abandoned`)."""
        return self.fs.exists(self.marker_uri(batch_id, "", "abandoned"))

    def share_abandoned(self, record: CommitRecord, share: TableShare) -> bool:
        return any(self.fs.exists(uri) for uri in self._markers(record, share, "abandoned"))

    def abandon_reason(self, record: CommitRecord, share: TableShare) -> str:
        """Why a share was abandoned (its marker says)."""
        for uri in self._markers(record, share, "abandoned"):
            if self.fs.exists(uri):
                return self.fs.read_bytes(uri).decode("utf-8", "replace") or "abandoned"
        return "abandoned"

    def abandon(self, record: CommitRecord, share: TableShare, reason: str) -> None:
        """Mark a committed share as never to be published (its table refused its content), and
        remove its data files (never in the table) and its other attempts'."""
        self.fs.write_bytes(self.marker_uri(record.batch_id, share.table, "abandoned"), reason.encode())
        self._discard_files(share)
        self._tables().sink(share.table).discard_attempts(self.fs, self.query_id, record.batch_id, keep=None)
        logger.error(
            "table share abandoned", extra={"batch_id": record.batch_id, "table": share.table, "reason": reason}
        )

    def set_aside(self, record: CommitRecord, share: TableShare) -> None:
        """Mark a share whose publication was set aside (its history rows are appended when it is
        published, not with the batch's)."""
        self.fs.write_bytes(self.marker_uri(record.batch_id, share.table, "deferred"), b"")

    def is_set_aside(self, record: CommitRecord, share: TableShare) -> bool:
        return self.fs.exists(self.marker_uri(record.batch_id, share.table, "deferred"))

    def _markers(self, record: CommitRecord, share: TableShare, kind: str) -> list[str]:
        own = self.marker_uri(record.batch_id, share.table, kind)
        return (
            [own] if record.schema_version > 1 or not share.table else [own, self.marker_uri(record.batch_id, "", kind)]
        )

    def _tables(self) -> Tables:
        if self.tables is None:
            raise RuntimeError("this committer reads the ledger only: it has no tables to publish to")
        return self.tables

    def _discard_own(self, record: CommitRecord) -> None:
        """A fenced attempt's files written in place are never committed: remove them now rather than
        leave them to orphan-file clean-up."""
        for share in record.tables:
            self._discard_files(share)

    def _discard_files(self, share: TableShare) -> None:
        if self.tables is None or not self.tables.sink(share.table).in_place:
            return
        for item in share.data_files:
            try:
                self.fs.delete(item.final)
            except Exception:  # noqa: BLE001 - best effort: orphan clean-up removes it later
                logger.warning("could not remove an unpublished file", extra={"uri": item.final})

    def recent_records(self, *, since: datetime) -> list[CommitRecord]:
        """Commit records newer than ``since`` of batches that were not abandoned, in batch order;
        reads back from the newest only as far as needed, so a restart does not read the whole
        ledger."""
        listing = self.fs.list(self.commits_dir())
        names = sorted((i for i in listing if is_commit_record(i.name)), key=lambda i: i.name)
        # <batch>.abandoned (a whole batch), <batch>.<table>.abandoned (a share): never loaded
        abandoned = {i.name.removesuffix(".abandoned"): i.uri for i in listing if i.name.endswith(".abandoned")}
        out: list[CommitRecord] = []
        for info in reversed(names):
            record = CommitRecord.model_validate_json(self.fs.read_bytes(info.uri))
            if record.committed_at < since:
                break
            batch = info.name.removesuffix(".json")
            if batch in abandoned:
                continue
            out.append(record.without(abandoned_shares(record, batch, abandoned, self.fs.read_bytes)))
        return list(reversed(out))

    def abandoned_all(self, *, since: datetime) -> list[tuple[CommitRecord, TableShare]]:
        """The shares abandoned in every generation, of batches committed since ``since`` (a few:
        one read per abandoned share), for the dedupe index to forget their objects on a restart
        whatever its snapshot remembers."""
        out: list[tuple[CommitRecord, TableShare]] = []
        for query in self.fs.list(f"{self.output_uri}/{COMMITS_DIR}"):
            if not query.is_dir:
                continue
            for info in self.fs.list(query.uri):
                if not info.name.endswith(".abandoned") or info.name.count(".") < 2:
                    continue  # <batch>.<table>.abandoned (a whole batch's, from before routing, is skipped whole)
                batch, _, table = info.name.removesuffix(".abandoned").partition(".")
                uri = f"{query.uri}/{batch}.json"
                if not self.fs.exists(uri):
                    continue
                record = CommitRecord.model_validate_json(self.fs.read_bytes(uri))
                share = record.share(table)
                if share is not None and record.committed_at >= since:
                    out.append((record, share))
        return out

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


def abandoned_shares(
    record: CommitRecord, batch: str, markers: Mapping[str, str], read: Callable[[str], bytes]
) -> dict[str, str]:
    """The record's shares abandoned, by their markers (``<batch>.<table>`` -> the marker's URI):
    table -> why."""
    out = {}
    for share in record.tables:
        uri = markers.get(f"{batch}.{share.table}") if share.table else None
        if uri is not None:
            out[share.table] = read(uri).decode("utf-8", "replace") or "abandoned"
    return out
