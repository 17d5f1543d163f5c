"""The seam between the batch path and where its files become visible."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import cache
from typing import Protocol

from contracts.ledger import CommitRecord
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.settings import JobSettings
from glue_processor.table.declared import DeclaredSchema
from glue_processor.table.partitioning import PartitionPlan


class Sink(Protocol):
    # True: tasks write final files under output_dir (nothing moves); False: files are staged, then moved
    in_place: bool

    def open(self) -> None:
        """Reach the table before the first batch: a catalog or table that is wrong stops the job at
        start-up, and the first batch does only its own work."""
        ...

    def partition(self, committed_at: datetime) -> str:
        """The label of the partition a batch committed at this time writes (its commit record's)."""
        ...

    def output_dir(self, committed_at: datetime, *, query_id: str, batch_id: int, attempt: str) -> str:
        """Where the batch attempt's data files go (or will be moved to)."""
        ...

    def check(self, record: CommitRecord, footers: Mapping[str, bytes] | None = None) -> None:
        """Before the commit record: raise :class:`~glue_processor.commit.publication.PublishRefused` when
        the table's catalog would refuse the batch's schema change (names, width, types)."""
        ...

    def publish(self, record: CommitRecord, footers: Mapping[str, bytes] | None = None) -> int | None:
        """Make the committed record's data files visible, idempotently; the snapshot id if any."""
        ...

    def discard_attempts(self, fs: HadoopFS, query_id: str, batch_id: int, *, keep: str | None) -> None:
        """Remove what the batch's other attempts wrote where the table keeps its files (in-place sinks)."""
        ...

    def stats(self) -> dict[str, int]:
        """The table's size as of the last publication (snapshots, data files), for the metrics."""
        ...


def sink_for(
    settings: JobSettings, fs: HadoopFS, declared: DeclaredSchema | None = None, plan: PartitionPlan | None = None
) -> Sink:
    if settings.table_format == "hive-parquet":
        from glue_processor.table.hive import HiveSink

        columns = None
        if settings.catalog_uri == "glue":
            import boto3

            from glue_processor.table.hive_catalog import GlueColumns

            columns = GlueColumns(boto3.client("glue"), settings.database, settings.table_name, declared)
        return HiveSink(fs, settings.output_uri, columns)
    from glue_processor.table.catalog import ensure_table, open_catalog
    from glue_processor.table.iceberg import IcebergSink
    from glue_processor.table.partitioning import parse_partition_by
    from glue_processor.table.schema import typed_columns

    partitions = plan or parse_partition_by(settings.partition_by, declared)

    @cache
    def catalog():  # type: ignore[no-untyped-def]
        return open_catalog(settings.catalog_uri)

    @cache
    def table():  # type: ignore[no-untyped-def]
        return ensure_table(
            catalog(),
            settings.database,
            settings.table_name,
            location=settings.table_location,
            plan=partitions,
            columns=typed_columns(declared, partitions),
        )

    retention = timedelta(hours=settings.snapshot_retention_hours)
    history = None
    if settings.load_history_table:
        from glue_processor.table.history import LoadHistory, ensure_history_table

        name = settings.load_history_table

        @cache
        def history_table():  # type: ignore[no-untyped-def]
            return ensure_history_table(catalog(), settings.database, name, location=f"{settings.output_uri}/{name}")

        history = LoadHistory(
            history_table, data_table=f"{settings.database}.{settings.table_name}", snapshot_retention=retention
        )
    return IcebergSink(table, snapshot_retention=retention, history=history)
