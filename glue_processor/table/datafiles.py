"""Iceberg data-file entries (path, size, partition, column statistics) from Parquet footers."""

from __future__ import annotations

import pyarrow as pa
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


class DataFiles:
    """Entries of Parquet files written for ``metadata``'s schema. What depends on the schema alone
    (the statistics plan, the column mapping, the compatibility of a file's Arrow schema) is worked
    out once, not once per file: a batch over many partitions has a file per partition, all with
    the same columns."""

    def __init__(self, io: FileIO, metadata: TableMetadata) -> None:
        self.io = io
        self.metadata = metadata
        self.schema = metadata.schema()
        self.spec = metadata.spec()
        self.stats_columns = compute_statistics_plan(self.schema, metadata.properties)
        self.mapping = parquet_path_to_id_mapping(self.schema)
        self._compatible: set[pa.Schema] = set()

    def entry(self, path: str, size: int, footer: bytes | None = None) -> DataFile:
        """``footer`` is what the file's write task returned; without it (a re-run after a crash)
        the footer is read back from the file."""
        if footer:
            parquet = metadata_of(footer)
        else:
            with self.io.new_input(path).open() as stream:
                parquet = pq.read_metadata(stream)
        arrow = parquet.schema.to_arrow_schema()
        if arrow not in self._compatible:
            # every column of the file is in the table's schema, with a compatible type
            _check_pyarrow_schema_compatible(self.schema, arrow, format_version=self.metadata.format_version)
            self._compatible.add(arrow)
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=parquet, stats_columns=self.stats_columns, parquet_column_mapping=self.mapping
        )
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.PARQUET,
            # the partition of a file comes from its statistics: a file holds one partition's rows
            partition=statistics.partition(self.spec, self.schema),
            file_size_in_bytes=size,
            sort_order_id=None,
            spec_id=self.metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )
