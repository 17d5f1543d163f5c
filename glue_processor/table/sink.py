"""The seam between the batch path and where its files become visible: one sink per table.

A batch writes a share to each table its objects are routed to (:mod:`glue_processor.plan.routes`);
:class:`Tables` holds each table's sink (opened once, on first use) and the load history they share.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from contracts.exceptions import ConfigError
from contracts.ledger import CommitRecord, PublishedFile, TableShare
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.plan.routes import Routes, TableConfig
from glue_processor.settings import JobSettings
from glue_processor.shared.partitioning import parse_partition_by

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile

    from glue_processor.keys.state import Segment
    from glue_processor.shared.declared import DeclaredSchema
    from glue_processor.table.datafiles import StatsPlan, WrittenFile
    from glue_processor.table.history import LoadHistory
    from glue_processor.table.quarantine import QuarantineTable

logger = logging.getLogger(__name__)


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

    def stats_plan(self, keys: tuple[str, ...], declared: DeclaredSchema | None) -> StatsPlan | None:
        """What the write tasks need to work out their files' table statistics (None: nothing to work out)."""
        ...

    def check(self, share: TableShare, written_files: Mapping[str, WrittenFile] | None = None) -> None:
        """Before the commit record: raise :class:`~glue_processor.commit.publication.PublishRefused` when
        the table's catalog would refuse the share's schema change (names, width, types)."""
        ...

    def publish(
        self, record: CommitRecord, share: TableShare, written_files: Mapping[str, WrittenFile] | None = None
    ) -> int | None:
        """Make the committed share's data files visible, idempotently; the snapshot id if any."""
        ...

    def discard_attempts(self, fs: HadoopFS, query_id: str, batch_id: int, *, keep: str | None) -> None:
        """Remove what the batch's other attempts wrote where the table keeps its files (in-place sinks)."""
        ...

    def stats(self) -> dict[str, int]:
        """The table's size as of the last publication (snapshots, data files), for the metrics."""
        ...

    def files_holding(self, segments: Sequence[Segment]) -> list[DataFile]:
        """The table's data files that may hold the rows of ``segments`` (docs/mirror.md)."""
        ...

    def files_of_each(self, segments_of: Mapping[Any, Sequence[Segment]]) -> dict[Any, dict[str, int]]:
        """For each key, the data files (path -> bytes) that may hold its rows, found in one scan."""
        ...

    def added_partitions(self, snapshot_id: int) -> tuple[str, ...]:
        """The partitions of the files a snapshot of this table added (a key's segment keeps them)."""
        ...


class Tables:
    """The job's tables: a sink per table, made on first use, the load history and the quarantine."""

    def __init__(self, settings: JobSettings, fs: HadoopFS, routes: Routes) -> None:
        self.settings, self.fs, self.routes = settings, fs, routes
        self._sinks: dict[str, Sink] = {}
        self._lock = threading.Lock()  # shares publish in parallel threads
        self._catalogs: list[Any] = []
        self._catalog_lock = threading.Lock()
        self.history = history_for(settings, self.catalog) if settings.table_format == "iceberg" else None
        self.quarantine = quarantine_for(settings, self.catalog) if settings.table_format == "iceberg" else None

    def config(self, table: str) -> TableConfig:
        """A table's configuration; a table the routing no longer names (a share committed before the
        routing changed) gets the job's defaults, and its sink takes the table as it is."""
        name = self.routes.name(table)
        found = self.routes.tables.get(name)
        if found is not None:
            return found
        return TableConfig(
            name=name,
            location=self.settings.location_of(name),
            declared=None,
            partitions=parse_partition_by("", None) if self.settings.table_format == "iceberg" else None,
            target_file_bytes=self.settings.target_file_bytes,
            max_columns=self.settings.max_columns,
        )

    def routed(self, table: str) -> bool:
        return self.routes.name(table) in self.routes.tables

    @property
    def first(self) -> Sink:
        """The sink of the routing's first table (of the one table without a routing file): what the
        batch asks of every sink alike (in place or not, the partition label of its records)."""
        return self.sink(next(iter(self.routes.tables)))

    def sink(self, table: str) -> Sink:
        name = self.routes.name(table)
        with self._lock:
            if name not in self._sinks:
                self._sinks[name] = sink_for(
                    self.settings, self.fs, self.config(name), self.catalog, adopt=self.routed(name)
                )
            return self._sinks[name]

    def open(self) -> None:
        """Reach every table the routing names (created on first use) and the load history. A table
        that cannot be what its routing says (its partitioning, its types) stops the job here; one
        out of reach for now (denied, throttled) does not stop the others: its shares wait, or are
        set aside, until it is back."""
        for name in self.routes.tables:
            try:
                self.sink(name).open()
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 - reported; its publication retries and counts it
                logger.error(
                    "a table is out of reach at start-up; its shares wait for it",
                    extra={"table": name, "error": f"{type(exc).__name__}: {exc}"[:500]},
                )
        if self.history is not None:
            self.history.open()
        if self.quarantine is not None:
            self.quarantine.open()

    def stats(self) -> dict[str, dict[str, int]]:
        """Each table's size as of its last publication (a table out of reach: left out)."""
        out = {}
        for name, sink in self.sinks().items():
            try:
                out[name] = sink.stats()
            except Exception as exc:  # noqa: BLE001 - a metric, never a reason to fail a batch
                logger.warning("no statistics of a table", extra={"table": name, "error": str(exc)[:300]})
        return out

    def catalog(self) -> Any:
        """One catalog client for every table of the job (made on first use; pyiceberg's catalogs
        are safe to share between threads)."""
        with self._catalog_lock:
            if not self._catalogs:
                from glue_processor.table.catalog import open_catalog

                self._catalogs.append(open_catalog(self.settings.catalog_uri))
            return self._catalogs[0]

    def sinks(self) -> dict[str, Sink]:
        """The sinks made so far."""
        with self._lock:
            return dict(self._sinks)


def sink_for(
    settings: JobSettings, fs: HadoopFS, config: TableConfig, catalog: Callable[[], Any], *, adopt: bool = True
) -> Sink:
    """The sink of one table: an Iceberg table of the job's catalog, or hive-parquet directories.
    ``adopt``: bring the table to its configuration (create it, add its declared columns, set its
    partitioning while it has no data); else take it as it is (a table the routing no longer names)."""
    if settings.table_format == "hive-parquet":
        from glue_processor.table.hive import HiveSink

        columns = None
        if settings.catalog_uri == "glue":
            import boto3

            from glue_processor.table.hive_catalog import GlueColumns

            columns = GlueColumns(boto3.client("glue"), settings.database, config.name, config.declared)
        return HiveSink(fs, settings.output_uri, columns)
    from glue_processor.table.catalog import ensure_table
    from glue_processor.table.iceberg import IcebergSink
    from glue_processor.table.schema import typed_columns

    partitions = config.partitions or parse_partition_by("", None)

    def table() -> Any:
        if not adopt:
            return catalog().load_table((settings.database, config.name))
        columns = typed_columns(config.declared, partitions)
        return ensure_table(
            catalog(), settings.database, config.name, location=config.location, plan=partitions, columns=columns
        )

    return IcebergSink(
        opened_once(table),
        snapshot_retention=timedelta(hours=settings.snapshot_retention_hours),
        location=config.location,
    )


def opened_once(make: Callable[[], Any]) -> Callable[[], Any]:
    """``make()``'s table, made by the first thread that asks and kept."""
    opened: list[Any] = []
    lock = threading.Lock()

    def table() -> Any:
        with lock:
            if not opened:
                opened.append(make())
            return opened[0]

    return table


def history_for(settings: JobSettings, catalog: Callable[[], Any]) -> LoadHistory | None:
    """The load history (``--load_history_table``; '' for none)."""
    if not settings.load_history_table:
        return None
    from glue_processor.table.history import SCHEMA as HISTORY
    from glue_processor.table.history import LoadHistory, ensure_dated_table

    name = settings.load_history_table
    return LoadHistory(
        opened_once(
            lambda: ensure_dated_table(catalog(), settings.database, name, HISTORY, location=settings.location_of(name))
        ),
        database=settings.database,
        legacy=settings.table_name,
        snapshot_retention=timedelta(hours=settings.snapshot_retention_hours),
    )


def quarantine_for(settings: JobSettings, catalog: Callable[[], Any]) -> QuarantineTable | None:
    """The quarantine table (``--quarantine_table``; '' for none), read from the batch's quarantine
    files where they are (staged until the batch settles, then in place)."""
    if not settings.quarantine_table:
        return None
    from glue_processor.shared.objects import ObjectMissing, store_for
    from glue_processor.table.history import ensure_dated_table
    from glue_processor.table.quarantine import SCHEMA, QuarantineTable

    name = settings.quarantine_table

    def read(f: PublishedFile) -> bytes:
        # read as the tasks read objects (boto3 on S3, a file locally), not through the JVM: py4j
        # hands a byte array over element by element (~60 ms a MB: 10 s for a batch's 155 MB of
        # quarantined lines, `make bench-rules`' mixed shape)
        try:
            return store_for(f.staged).read(f.staged).data
        except ObjectMissing:  # the batch settled: its files are in place
            return store_for(f.final).read(f.final).data

    return QuarantineTable(
        opened_once(
            lambda: ensure_dated_table(catalog(), settings.database, name, SCHEMA, location=settings.location_of(name))
        ),
        read,
        database=settings.database,
        legacy=settings.table_name,
        snapshot_retention=timedelta(hours=settings.snapshot_retention_hours),
    )
