"""``make query``: SQL over the local table, with DuckDB, on the table's current snapshot.

Each Iceberg table's current data files (from the embedded catalog) become a DuckDB view named like
the table (``events``, also ``ingest.events``; with a routing file, one view per table); in
hive-parquet mode the view is over the visible Parquet files. The load history, when written, is the
view ``load_history``. The default query counts rows and files per partition of each table.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from glue_processor.local.layout import LocalLayout
from glue_processor.local.text import aligned
from glue_processor.table.catalog import open_catalog
from glue_processor.table.read import published_files

LOAD_HISTORY = "load_history"  # JobSettings.load_history_table's default: make run's
# Iceberg: the table's partitions as its metadata counts them (a view `partitions`); hive-parquet: by day.
PARTITIONS_SQL = 'SELECT "table", partition, rows, files, mb FROM partitions ORDER BY "table", partition'
DAYS_SQL = (
    "SELECT strftime(_ingest_time, '%Y-%m-%d') AS ingest_day, count(*) AS rows, count(DISTINCT filename) AS files "
    "FROM events GROUP BY 1 ORDER BY 1"
)


def connect(output: Path, *, database: str = "ingest", table_name: str = "events") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with each table as a view (``table_name`` always, even empty)."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f'CREATE SCHEMA "{database}"')
    catalog_db = output / "_catalog" / "catalog.db"
    catalog = open_catalog(f"sqlite:///{catalog_db}") if catalog_db.exists() else None
    names: set[str] = set()
    if catalog is not None:
        with contextlib.suppress(NoSuchNamespaceError):
            names |= {ident[-1] for ident in catalog.list_tables(database) if ident[-1] != LOAD_HISTORY}
    names = names or {table_name}  # no table yet (or hive-parquet): the job's own, empty until written
    for name in sorted(names):
        _view(con, output, database, name)
    if catalog is not None:
        parts = []
        for name in sorted(names):
            with contextlib.suppress(NoSuchTableError):
                part = partitions_of(catalog.load_table((database, name)))
                parts.append(part.add_column(0, "table", pa.array([name] * part.num_rows, pa.string())))
        if parts:
            con.register("partitions", pa.concat_tables(parts, promote_options="permissive"))
        with contextlib.suppress(NoSuchTableError):  # the load history (--load_history_table), once written
            con.register("load_history", catalog.load_table((database, LOAD_HISTORY)).scan().to_arrow())
    return con


def _view(con: duckdb.DuckDBPyConnection, output: Path, database: str, table_name: str) -> None:
    files = [str(p) for p in published_files(output, database=database, table_name=table_name)]
    if files:
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        source = f"read_parquet([{listed}], union_by_name = true, filename = true, hive_partitioning = false)"
    else:
        source = (
            "(SELECT NULL::VARCHAR AS _source_uri, NULL::BIGINT AS _line, NULL::TIMESTAMPTZ AS _ingest_time, "
            "NULL::VARCHAR AS filename WHERE false)"
        )
    # names are the settings' (validated [a-z0-9_]) and quoted paths: no user SQL is interpolated
    con.execute(f'CREATE VIEW "{database}"."{table_name}" AS SELECT * FROM {source}')  # noqa: S608
    con.execute(f'CREATE VIEW "{table_name}" AS SELECT * FROM "{database}"."{table_name}"')  # noqa: S608


def partitions_of(table: Table) -> pa.Table:
    """One row per partition of the current snapshot: its path (``name=value/...``), rows, files, MB."""
    if table.current_snapshot() is None:
        return pa.table(
            {
                "partition": pa.array([], pa.string()),
                "rows": pa.array([], pa.int64()),
                "files": pa.array([], pa.int32()),
                "mb": pa.array([], pa.float64()),
            }
        )
    raw = table.inspect.partitions()
    labels = [
        "/".join(f"{k}={'null' if v is None else v}" for k, v in (p or {}).items())
        for p in raw["partition"].to_pylist()
    ]
    return pa.table(
        {
            "partition": pa.array(labels, pa.string()),
            "rows": raw["record_count"],
            "files": raw["file_count"],
            "mb": pa.compute.round(pa.compute.divide(raw["total_data_file_size_in_bytes"].cast(pa.float64()), 1e6), 2),
        }
    )


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    return aligned(columns, rows, left=len(columns), null="NULL") + f"\n({len(rows)} rows)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="query", description=__doc__)
    p.add_argument("--workdir", type=Path, default=Path(".work"))
    p.add_argument("--sql", default="", help="the query (default: rows and files per partition)")
    p.add_argument("--format", choices=("table", "csv"), default="table")
    args = p.parse_args(argv)
    layout = LocalLayout(args.workdir.resolve())
    try:
        con = connect(layout.output)
        iceberg = (layout.output / "_catalog" / "catalog.db").exists()
        relation = con.sql(args.sql or (PARTITIONS_SQL if iceberg else DAYS_SQL))
        if relation is None:  # a statement without rows
            return 0
        columns = list(relation.columns)
        # through Arrow: time zones without pytz, decimals and maps as they are
        arrow = relation.to_arrow_table()
        rows = list(zip(*(arrow.column(i).to_pylist() for i in range(arrow.num_columns)), strict=True))
    except duckdb.Error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        print(render(columns, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
