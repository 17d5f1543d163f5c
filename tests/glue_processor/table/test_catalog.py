"""Opening the table at start-up: a declared type its column cannot take stops the job there."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from contracts.exceptions import ConfigError
from glue_processor.table.catalog import ensure_table, open_catalog


def _open(tmp_path: Path, columns: pa.Schema) -> object:
    catalog = open_catalog(f"sqlite:///{tmp_path}/catalog.db")
    return ensure_table(catalog, "ingest", "events", location=f"file://{tmp_path}/events", columns=columns)


def test_a_declared_type_the_column_cannot_take_is_refused_at_start_up_in_one_line(tmp_path: Path) -> None:
    # Given a table whose columns were loaded as strings (no SCHEMA the first time)
    _open(tmp_path, pa.schema([("ts", pa.string()), ("amount", pa.string()), ("kind", pa.string())]))
    # When the job starts again with types declared for two of them
    declared = pa.schema(
        [("ts", pa.timestamp("us", tz="UTC")), ("amount", pa.decimal128(12, 2)), ("kind", pa.string())]
    )
    with pytest.raises(ConfigError) as refused:
        _open(tmp_path, declared)
    # Then it stops there, naming each clash (not the column that fits) and the ways out
    text = str(refused.value)
    assert "\n" not in text and text.startswith("table ingest.events: the declared types do not fit its columns")
    assert "ts: timestamptz declared, string in the table" in text
    assert "amount: decimal(12, 2) declared, string in the table" in text and "kind" not in text
    assert "a new WORKDIR" in text


def test_a_widening_declared_type_is_taken(tmp_path: Path) -> None:
    # Given a column declared int; when it is declared bigint (Iceberg's int -> long promotion)
    _open(tmp_path, pa.schema([("n", pa.int32())]))
    table = _open(tmp_path, pa.schema([("n", pa.int64())]))
    # Then the job starts, the column widened in place
    assert str(table.schema().find_field("n").field_type) == "long"  # type: ignore[attr-defined]
