"""The table's Iceberg schema and partition spec, from the batch's keys.

Data columns are strings (values as written; the seed's behaviour) named by
:func:`glue_processor.shared.names.column_names`; the lineage columns have their own types. The schema only
grows: a batch with new keys adds columns, never removes or retypes one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform, MonthTransform, YearTransform
from pyiceberg.types import IcebergType, LongType, NestedField, StringType, TimestamptzType

from glue_processor.shared.declared import RESCUED, RESCUED_TYPE, DeclaredSchema
from glue_processor.shared.extra import EXTRA, EXTRA_TYPE
from glue_processor.shared.names import LINEAGE_TYPES as ARROW_LINEAGE
from glue_processor.shared.names import STRING, TIMESTAMP, column_names
from glue_processor.shared.partitioning import PartitionPlan

# The lineage columns as Iceberg types, from their one declaration (glue_processor/shared/names.py).
_ICEBERG: dict[pa.DataType, IcebergType] = {
    pa.string(): StringType(),
    pa.int64(): LongType(),
    TIMESTAMP: TimestamptzType(),
}
LINEAGE_TYPES: dict[str, IcebergType] = {name: _ICEBERG[type_] for name, type_ in ARROW_LINEAGE.items()}
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


TRANSFORMS: dict[str, Any] = {
    "year": YearTransform,
    "month": MonthTransform,
    "day": DayTransform,
    "hour": HourTransform,
    "identity": IdentityTransform,
}


def spec_fields(plan: PartitionPlan) -> list[tuple[str, Any, str]]:
    """(source column, transform, partition field name) of each field of the plan."""
    return [(f.column, TRANSFORMS[f.transform](), f.name) for f in plan.fields]


def same_spec(spec: PartitionSpec, schema: Schema, plan: PartitionPlan) -> bool:
    have = [(schema.find_column_name(f.source_id), str(f.transform), f.name) for f in spec.fields]
    return have == [(c, str(t), n) for c, t, n in spec_fields(plan)]


def data_columns(keys: Iterable[str], declared: pa.Schema | None = None) -> pa.Schema:
    """The Arrow schema of a batch's data columns (strings, or the type a file declares), to union
    into the table's."""
    types = {f.name: f.type for f in declared} if declared is not None else {}
    fields = [pa.field(name, types.get(name, STRING)) for _, name in column_names(tuple(keys))]
    if RESCUED in types:
        fields.append(pa.field(RESCUED, types[RESCUED]))
    return pa.schema(fields)


def missing_columns(schema: Schema, keys: Iterable[str], declared: pa.Schema | None = None) -> list[str]:
    """Column names of ``keys`` (and ``_rescued`` with declared types) the table does not have yet."""
    have = {f.name for f in schema.fields}
    names = [name for _, name in column_names(tuple(keys))]
    if declared is not None and RESCUED in declared.names:
        names.append(RESCUED)
    return [name for name in names if name not in have]


def typed_columns(declared: DeclaredSchema | None, plan: PartitionPlan | None = None) -> pa.Schema:
    """Columns the table needs before any data: ``_extra``, the declared ones (typed) with ``_rescued``,
    and the string columns an identity partition of ``plan`` reads (a partition's source must exist)."""
    fields: dict[str, pa.DataType] = {EXTRA: EXTRA_TYPE}
    if declared is not None:
        for key, name in column_names(declared.keys):
            column = declared.get(key)
            assert column is not None
            fields[name] = column.arrow_type
        fields[RESCUED] = RESCUED_TYPE
    for f in plan.fields if plan is not None else ():
        if f.column not in fields and f.column not in LINEAGE_TYPES:
            fields[f.column] = STRING
    return pa.schema([pa.field(n, t) for n, t in fields.items()])
