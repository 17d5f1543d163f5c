"""The plain-Parquet sink (``--table_format hive-parquet``): staged files move to ``dt=<day>/``.

Files are staged under ``<output>/_staging/`` (invisible: readers skip ``_`` names) and, after the
commit record, moved to deterministic final names, many at once (on S3 a move is a copy and a
delete, so a batch's moves run in parallel instead of one after another). A move whose target exists
was done before a crash and is skipped, so publishing again is safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

from contracts.exceptions import StorageError
from contracts.ledger import CommitRecord, PublishedFile, TableShare
from glue_processor import faults
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.table.hive_catalog import GlueColumns

if TYPE_CHECKING:
    from glue_processor.shared.declared import DeclaredSchema
    from glue_processor.table.datafiles import StatsPlan, WrittenFile

# Moves in flight at once (each is an S3 copy of up to the target size).
PARALLEL_MOVES = 16


class HiveSink:
    in_place = False

    def __init__(self, fs: HadoopFS, output_uri: str, columns: GlueColumns | None = None) -> None:
        self.fs = fs
        self.output_uri = output_uri
        # the Glue table's columns follow the keys (on AWS; locally there is no catalog)
        self.columns = columns

    def open(self) -> None:
        """Nothing to reach first: files are moved under the output prefix, and the Glue table's
        columns are updated after a batch with new keys."""

    def partition(self, committed_at: datetime) -> str:
        return f"dt={committed_at:%Y-%m-%d}"

    def output_dir(self, committed_at: datetime, *, query_id: str = "", batch_id: int = 0, attempt: str = "") -> str:
        return f"{self.output_uri}/{self.partition(committed_at)}"

    def stats_plan(self, keys: tuple[str, ...], declared: DeclaredSchema | None) -> StatsPlan | None:
        """None: a Hive table keeps no statistics of its files."""
        return None

    def check(self, share: TableShare, written_files: Mapping[str, WrittenFile] | None = None) -> None:
        if self.columns is not None and share.data_files:
            self.columns.check(share.keys)

    def publish(
        self, record: CommitRecord, share: TableShare, written_files: Mapping[str, WrittenFile] | None = None
    ) -> int | None:
        move_all(self.fs, share.data_files)
        if self.columns is not None and share.data_files:
            self.columns.sync(share.keys)
        return None

    def discard_attempts(self, fs: HadoopFS, query_id: str, batch_id: int, *, keep: str | None) -> None:
        """Nothing: attempts write under the staging directory, which the committer removes."""

    def files_holding(self, segments: Sequence[Any]) -> list[Any]:
        """Never asked: a hive-parquet table only appends (its settings refuse replace and retract)."""
        raise NotImplementedError("a hive-parquet table only appends")

    def files_of_each(self, segments_of: Any) -> dict[Any, dict[str, int]]:
        raise NotImplementedError("a hive-parquet table only appends")

    def added_partitions(self, snapshot_id: int) -> tuple[str, ...]:
        return ()

    def stats(self) -> dict[str, int]:
        return {}


def move_all(fs: HadoopFS, files: tuple[PublishedFile, ...]) -> None:
    """Move staged files to their final names (idempotent), in parallel."""
    if not files:
        return
    _move(fs, files[0])
    faults.hit("mid-publish")  # some files moved, others (and the staging clean-up) not yet
    with ThreadPoolExecutor(max_workers=PARALLEL_MOVES) as pool:
        list(pool.map(lambda f: _move(fs, f), files[1:]))


def _move(fs: HadoopFS, item: PublishedFile) -> None:
    if item.staged == item.final or fs.exists(item.final):
        return
    if not fs.exists(item.staged):
        raise StorageError(f"committed file lost: neither {item.final} nor its staged copy {item.staged} exists")
    fs.move(item.staged, item.final)
