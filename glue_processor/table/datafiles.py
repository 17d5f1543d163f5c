"""Iceberg data-file entries (path, size, partition, column statistics) from Parquet footers."""

from __future__ import annotations

import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    _check_pyarrow_schema_compatible,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table.metadata import TableMetadata

from glue_processor.table.footer import metadata_of


def data_file(io: FileIO, metadata: TableMetadata, path: str, size: int, footer: bytes | None = None) -> DataFile:
    """The entry of a Parquet file written for ``metadata``'s schema. ``footer`` is what its write task
    returned; without it (a re-run after a crash) the footer is read back from the file."""
    if footer:
        parquet = metadata_of(footer)
    else:
        with io.new_input(path).open() as stream:
            parquet = pq.read_metadata(stream)
    schema = metadata.schema()
    # every column of the file is in the table's schema, with a compatible type
    _check_pyarrow_schema_compatible(schema, parquet.schema.to_arrow_schema(), format_version=metadata.format_version)
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=parquet,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        # the partition of a file comes from its statistics: a file holds one partition's rows
        partition=statistics.partition(metadata.spec(), schema),
        file_size_in_bytes=size,
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
