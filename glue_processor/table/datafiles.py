"""Iceberg data-file entries (path, size, partition, column statistics) from Parquet footers.

A file's statistics depend on its footer and on the table as the append will find it: its schema
(the field ids the columns map to), partition spec, metrics properties and format version, a
:class:`StatsPlan`. The driver builds that plan before the write stage (the schema after the batch's
new columns, staged on a transaction it never commits), so each write task works out its own files'
statistics (:meth:`StatsPlan.of`) in parallel, and the driver's share of a file is assembling its
entry. An entry whose plan is not the one the append ends with (another writer changed the table in
between) is worked out again on the driver: the statistics are only ever those of the committed
schema.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pyiceberg
from pyiceberg.exceptions import ResolveError
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    MetricModeTypes,
    StatisticsCollector,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    match_metrics_mode,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema, index_by_id, promote
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record, TableVersion
from pyiceberg.types import BinaryType, IcebergType, ListType, MapType, NestedField, StringType, StructType

from glue_processor.commit.publication import PublishRefused
from glue_processor.table.footer import metadata_of

# the metrics of a string partition source column whose table's configuration keeps no bounds for it
SOURCE_METRICS = "truncate(16)"


@dataclass(frozen=True)
class FileStats:
    """A data file's partition and statistics (``DataFile`` fields, read-only), for the plan keyed
    ``plan``."""

    plan: str
    partition: Record
    values: dict[str, Any]


@dataclass(frozen=True)
class WrittenFile:
    """What the task that wrote a data file returned about it: its footer, and its statistics when
    the task had the table's plan."""

    footer: bytes
    stats: FileStats | None = None


class StatsPlan:
    """What a file's statistics depend on besides the file, worked out once for every file of a
    batch (they all share the table's columns). It travels to the write tasks as JSON (the schema,
    the spec) and is worked out again there: pyiceberg's own objects do not survive a pickle whole
    (a partition then reads as all NULL)."""

    def __init__(self, metadata: TableMetadata) -> None:
        self._setup(metadata.schema(), metadata.spec(), dict(metadata.properties), metadata.format_version)

    def _setup(
        self, schema: Schema, spec: PartitionSpec, properties: dict[str, str], format_version: TableVersion
    ) -> None:
        self.schema, self.spec, self.properties, self.format_version = schema, spec, properties, format_version
        self.spec_id = spec.spec_id
        self.stats_columns = _bounded_sources(compute_statistics_plan(schema, properties), spec)
        self.mapping = parquet_path_to_id_mapping(schema)
        self.key = hashlib.sha256(
            json.dumps(
                [
                    pyiceberg.__version__,  # a task whose pyiceberg differs never matches the driver's plan
                    schema.model_dump_json(exclude={"schema_id"}),
                    spec.model_dump_json(),
                    sorted(properties.items()),
                    format_version,
                ]
            ).encode()
        ).hexdigest()
        self._compatible: set[pa.Schema] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "schema": self.schema.model_dump_json(),
            "spec": self.spec.model_dump_json(),
            "properties": self.properties,
            "format_version": self.format_version,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        try:
            self._setup(
                Schema.model_validate_json(state["schema"]),
                PartitionSpec.model_validate_json(state["spec"]),
                state["properties"],
                state["format_version"],
            )
        except Exception as exc:  # noqa: BLE001 - e.g. another pyiceberg on the executor: the driver works it out
            self.key, self._broken = "", f"{type(exc).__name__}: {exc}"[:500]

    def of(self, parquet: pq.FileMetaData) -> FileStats:
        """The file's statistics; raises when a column of the file is not in the schema with a
        compatible type."""
        if not self.key:
            raise ValueError(f"the table's statistics plan did not reach this task whole: {self._broken}")
        arrow = parquet.schema.to_arrow_schema()
        if arrow not in self._compatible:
            # every column of the file is in the table's schema, with a compatible type
            check_compatible(self.schema, arrow, format_version=self.format_version)
            self._compatible.add(arrow)
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=parquet, stats_columns=self.stats_columns, parquet_column_mapping=self.mapping
        )
        # the partition of a file comes from its statistics: a file holds one partition's rows
        return FileStats(self.key, statistics.partition(self.spec, self.schema), statistics.to_serialized_dict())


def check_compatible(schema: Schema, arrow: pa.Schema, *, format_version: TableVersion) -> None:
    """Raise ValueError unless a file of ``arrow``'s columns may be appended to a table of
    ``schema``: pyiceberg's rule for an append (its ``Transaction.append`` and ``add_files``), from
    its public parts. Every column of the file is a field of the table (by its field id, else by
    the table's name mapping); a field the table requires is in the file, and required there; a
    field's type in the file is the table's, or promotes to it (a nested field is checked only
    where its parent is in the file)."""
    try:
        given = index_by_id(pyarrow_to_schema(arrow, name_mapping=schema.name_mapping, format_version=format_version))
    except ValueError as exc:
        raise ValueError(f"the file has a column the table's schema does not: {exc}") from exc
    problems = list(_mismatches(schema.fields, given))
    if problems:
        raise ValueError("the file does not fit the table's schema: " + "; ".join(problems))


def _mismatches(fields: Sequence[NestedField], given: dict[int, NestedField]) -> Iterator[str]:
    for want in fields:
        have = given.get(want.field_id)
        if have is None:
            if want.required:
                yield f"{want.name}: required, not in the file"
            continue
        if want.required and not have.required:
            yield f"{want.name}: required, optional in the file"
            continue
        if not _fits(have.field_type, want.field_type):
            yield f"{want.name}: {have.field_type} in the file, {want.field_type} in the table"
            continue
        yield from _mismatches(_children(want.field_type), given)


def _fits(have: IcebergType, want: IcebergType) -> bool:
    if have == want:
        return True
    if any(isinstance(have, kind) and isinstance(want, kind) for kind in (StructType, ListType, MapType)):
        return True  # the same kind of container: its children are checked on their own
    try:
        promote(have, want)
    except ResolveError:
        return False
    return True


def _children(kind: IcebergType) -> tuple[NestedField, ...]:
    if isinstance(kind, StructType):
        return kind.fields
    if isinstance(kind, ListType):
        return (kind.element_field,)
    if isinstance(kind, MapType):
        return (kind.key_field, kind.value_field)
    return ()


def _bounded_sources(columns: dict[int, StatisticsCollector], spec: PartitionSpec) -> dict[int, StatisticsCollector]:
    """The statistics plan, with bounds kept for every partition source column: a file's partition
    is read from its source column's bounds, so a metrics mode that keeps none there (``none`` or
    ``counts`` in ``write.metadata.metrics.*``) would append every file to the NULL partition."""
    for source in {f.source_id for f in spec.fields} & columns.keys():
        column = columns[source]
        if column.mode.type in (MetricModeTypes.NONE, MetricModeTypes.COUNTS):
            # Iceberg's default for the type: strings and binaries truncated, other types whole
            text = isinstance(column.iceberg_type, StringType | BinaryType)
            columns[source] = dataclasses.replace(column, mode=match_metrics_mode(SOURCE_METRICS if text else "full"))
    return columns


class DataFiles:
    """Entries of Parquet files appended to a table of ``metadata``."""

    def __init__(self, io: FileIO, metadata: TableMetadata) -> None:
        self.io = io
        self.plan = StatsPlan(metadata)
        self.from_tasks = 0  # entries whose statistics the write tasks worked out

    def entry(self, path: str, size: int, written: WrittenFile | None = None) -> DataFile:
        """The file's entry: from the statistics its task worked out for this plan, else from its
        footer (the task's, or read back from the file after a crash)."""
        stats = written.stats if written is not None else None
        if stats is None or stats.plan != self.plan.key:
            if written is not None and written.footer:
                parquet = metadata_of(written.footer)
            else:
                with self.io.new_input(path).open() as stream:
                    parquet = pq.read_metadata(stream)
            try:
                stats = self.plan.of(parquet)
            except (ValueError, ArithmeticError, KeyError, TypeError) as exc:
                # the file's content, not the moment (a bound Python cannot read, a column the schema
                # does not type so): every attempt would fail alike, so the share is refused, not retried
                raise PublishRefused(f"{path}: its table statistics cannot be worked out: {exc}"[:1000]) from exc
        else:
            self.from_tasks += 1
        entry = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=stats.partition,
            file_size_in_bytes=size,
            sort_order_id=None,
            equality_ids=None,
            key_metadata=None,
            **stats.values,
        )
        entry.spec_id = self.plan.spec_id
        return entry
