"""The table's Iceberg schema and partition spec, from the batch's keys.

Data columns are strings (values as written; the seed's behaviour) named by
:func:`glue_processor.ndjson.column_names`; the lineage columns have their own types. The schema only
grows: a batch with new keys adds columns, never removes or retypes one.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from glue_processor.ndjson import column_names

LINEAGE_TYPES = {
    "_source_uri": StringType(),
    "_source_etag": StringType(),
    "_line": LongType(),
    "_event_time": TimestamptzType(),
    "_batch_id": LongType(),
    "_ingest_time": TimestamptzType(),
}
# Default partitioning: the day a batch was ingested, as a hidden partition.
INGEST_DAY = "ingest_day"
PARTITION_SOURCE = "_ingest_time"


def initial_schema() -> Schema:
    """The lineage columns: what every table has before its first batch."""
    return Schema(
        *(NestedField(i, name, type_, required=False) for i, (name, type_) in enumerate(LINEAGE_TYPES.items(), 1))
    )


def default_spec(schema: Schema) -> PartitionSpec:
    source = schema.find_field(PARTITION_SOURCE)
    return PartitionSpec(PartitionField(source.field_id, 1000, DayTransform(), INGEST_DAY))


def data_columns(keys: Iterable[str]) -> pa.Schema:
    """The Arrow schema of a batch's data columns (strings), to union into the table's."""
    return pa.schema([pa.field(name, pa.large_string()) for _, name in column_names(tuple(keys))])


def missing_columns(schema: Schema, keys: Iterable[str]) -> list[str]:
    """Column names of ``keys`` that the table does not have yet."""
    have = {f.name for f in schema.fields}
    return [name for _, name in column_names(tuple(keys)) if name not in have]
