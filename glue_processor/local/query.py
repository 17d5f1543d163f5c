"""``make query``: SQL over the local tables, with DuckDB, on each table's current snapshot.

Every table of the run is a view under three names: ``events``, ``ingest.events`` (the local
database) and ``ndjson_ingest.events`` (the stack's database, as Athena names it), so the README's
queries run here as printed. The load history is ``load_history`` and the quarantine ``quarantine``,
each under the same three names. Beside
them: ``partitions``, ``files`` and ``snapshots`` (also ``meta.partitions`` and so on, the only names
when a table of the user's is called so), one row per partition (with its spec: a table whose
partitioning changed has both), data file and snapshot of each table (a column ``table`` says whose).
The default query lists the partitions.

The views read the Parquet files with no option that adds a column, so a field of the user's called
``filename`` (or anything else) never collides with one of ours.
"""

from __future__ import annotations

import contextlib
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from contracts.exceptions import ConfigError
from contracts.layout import ATHENA_DATABASE
from glue_processor.local.errors import Parser, cli, user_path
from glue_processor.local.layout import LocalLayout
from glue_processor.local.text import aligned
from glue_processor.table.catalog import open_catalog
from glue_processor.table.read import local_file, published_files

LOAD_HISTORY = "load_history"  # JobSettings.load_history_table's default: make run's
QUARANTINE = "quarantine"  # JobSettings.quarantine_table's default: make run's
LOCAL_DATABASE = "ingest"  # JobSettings.database's default: make run's
DEFAULT_SQL = 'SELECT "table", partition, spec_id, rows, files, mb FROM meta.partitions ORDER BY "table", partition'
# hive-parquet: no metadata to count rows from; files and MB per dt= directory
HIVE_SQL = (
    "SELECT \"table\", regexp_extract(path, 'dt=([^/]+)', 1) AS dt, count(*) AS files, round(sum(mb), 2) AS mb "
    "FROM meta.files GROUP BY ALL ORDER BY ALL"
)
EMPTY = pa.table({"table": pa.array([], pa.string())})
SHOWN_ROWS = 1000  # a table's rows printed at most (FORMAT=csv prints every row)
# what partitions_of and files_of give, empty or not (a table with no snapshot yet gives them empty:
# the default query, and the check of a table's format by its spec_id, read the same columns)
PARTITIONS = pa.schema(
    [
        ("partition", pa.string()),
        ("spec_id", pa.int32()),
        ("rows", pa.int64()),
        ("files", pa.int32()),
        ("mb", pa.float64()),
    ]
)
FILES = pa.schema(
    [
        ("path", pa.string()),
        ("partition", pa.string()),
        ("spec_id", pa.int32()),
        ("rows", pa.int64()),
        ("mb", pa.float64()),
    ]
)


def connect(output: Path, *, database: str = LOCAL_DATABASE, table_name: str = "events") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with each table as a view (``table_name`` always, even empty), the load
    history, and the ``partitions``, ``files`` and ``snapshots`` views."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    schemas = dict.fromkeys([database, ATHENA_DATABASE])
    for schema in schemas:
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    catalog_db = output / "_catalog" / "catalog.db"
    catalog = open_catalog(f"sqlite:///{catalog_db}") if catalog_db.exists() else None
    names = _table_names(catalog, database) or [table_name]  # hive-parquet, or nothing yet: the job's own
    tables = {name: _load(catalog, database, name) for name in names}
    for name in names:
        files = published_files(output, database=database, table_name=name)
        _views(con, schemas, name, _reader([str(f) for f in files]))
    for own in (LOAD_HISTORY, QUARANTINE):  # the job's own tables
        found = _load(catalog, database, own)
        if found is not None:
            con.register(f"_{own}", found.scan().to_arrow())
            _views(con, schemas, own, f"_{own}")
    parts, files, snaps = [], [], []
    for name, table in tables.items():
        if table is None:
            files.append(_hive_files(name, published_files(output, database=database, table_name=name)))
            continue
        parts.append(_labelled(name, partitions_of(table)))
        files.append(_labelled(name, files_of(table)))
        snaps.append(_labelled(name, snapshots_of(table)))
    con.execute('CREATE SCHEMA IF NOT EXISTS "meta"')
    for view, parts_of in (("partitions", parts), ("files", files), ("snapshots", snaps)):
        con.register(f"_{view}", pa.concat_tables(parts_of, promote_options="permissive") if parts_of else EMPTY)
        con.execute(f'CREATE VIEW "meta"."{view}" AS SELECT * FROM "_{view}"')  # noqa: S608 - our names
        if view not in names:  # a table of the user's called so keeps its name; the view is meta.<view>
            con.execute(f'CREATE VIEW "{view}" AS SELECT * FROM "_{view}"')  # noqa: S608
    return con


def _table_names(catalog: Catalog | None, database: str) -> list[str]:
    if catalog is None:
        return []
    with contextlib.suppress(NoSuchNamespaceError):
        names = (ident[-1] for ident in catalog.list_tables(database))
        return sorted(n for n in names if n not in (LOAD_HISTORY, QUARANTINE))
    return []


def _load(catalog: Catalog | None, database: str, name: str) -> Table | None:
    if catalog is None:
        return None
    try:
        return catalog.load_table((database, name))
    except NoSuchTableError:
        return None


def _reader(files: list[str]) -> str:
    if not files:
        return (
            "(SELECT NULL::VARCHAR AS _source_uri, NULL::BIGINT AS _line, NULL::TIMESTAMPTZ AS _ingest_time "
            "WHERE false)"
        )
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    # no filename/hive options: each would add a column that a user's field of that name collides with
    return f"read_parquet([{listed}], union_by_name = true, hive_partitioning = false)"


def _views(con: duckdb.DuckDBPyConnection, schemas: dict[str, None], name: str, source: str) -> None:
    # names are the catalog's (validated [a-z0-9_]) and quoted paths: no user SQL is interpolated
    first = next(iter(schemas))
    con.execute(f'CREATE VIEW "{first}"."{name}" AS SELECT * FROM {source}')  # noqa: S608
    for schema in [*list(schemas)[1:], None]:
        where = f'"{schema}"."{name}"' if schema else f'"{name}"'
        con.execute(f'CREATE VIEW {where} AS SELECT * FROM "{first}"."{name}"')  # noqa: S608


def _labelled(name: str, table: pa.Table) -> pa.Table:
    return table.add_column(0, "table", pa.array([name] * table.num_rows, pa.string()))


def partitions_of(table: Table) -> pa.Table:
    """One row per partition of the current snapshot: its path (``name=value/...``), rows, files, MB."""
    if table.current_snapshot() is None:  # the columns all the same: a table with no rows yet is Iceberg too
        return PARTITIONS.empty_table()
    raw = table.inspect.partitions()
    specs = raw["spec_id"].to_pylist()
    labels = [_label(p, _fields(table, s)) for p, s in zip(raw["partition"].to_pylist(), specs, strict=True)]
    return pa.table(
        {
            "partition": pa.array(labels, pa.string()),
            "spec_id": raw["spec_id"],
            "rows": raw["record_count"],
            "files": raw["file_count"],
            "mb": _mb(raw["total_data_file_size_in_bytes"]),
        },
        schema=PARTITIONS,
    )


def files_of(table: Table) -> pa.Table:
    """One row per data file of the current snapshot: path, partition, spec, rows, MB."""
    if table.current_snapshot() is None:
        return FILES.empty_table()
    raw = table.inspect.files()
    return pa.table(
        {
            "path": pa.array([str(local_file(p)) for p in raw["file_path"].to_pylist()], pa.string()),
            "partition": pa.array(
                [
                    _label(p, _fields(table, s))
                    for p, s in zip(raw["partition"].to_pylist(), raw["spec_id"].to_pylist(), strict=True)
                ],
                pa.string(),
            ),
            "spec_id": raw["spec_id"],
            "rows": raw["record_count"],
            "mb": _mb(raw["file_size_in_bytes"]),
        },
        schema=FILES,
    )


def snapshots_of(table: Table) -> pa.Table:
    """One row per snapshot the table keeps: when, what operation, which batch, rows and files added."""
    rows: dict[str, list[Any]] = {
        k: [] for k in ("snapshot_id", "committed_at", "operation", "batch_id", "added_rows", "added_files")
    }
    for s in table.metadata.snapshots:
        summary = s.summary.additional_properties if s.summary is not None else {}
        rows["snapshot_id"].append(s.snapshot_id)
        rows["committed_at"].append(s.timestamp_ms)
        rows["operation"].append(s.summary.operation.value if s.summary is not None else None)
        rows["batch_id"].append(int(summary["ingest.batch-id"]) if "ingest.batch-id" in summary else None)
        rows["added_rows"].append(int(summary.get("added-records", 0)))
        rows["added_files"].append(int(summary.get("added-data-files", 0)))
    return pa.table(
        {
            "snapshot_id": pa.array(rows["snapshot_id"], pa.int64()),
            "committed_at": pa.array(rows["committed_at"], pa.timestamp("ms", tz="UTC")),
            "operation": pa.array(rows["operation"], pa.string()),
            "batch_id": pa.array(rows["batch_id"], pa.int64()),
            "added_rows": pa.array(rows["added_rows"], pa.int64()),
            "added_files": pa.array(rows["added_files"], pa.int64()),
        }
    )


def _hive_files(name: str, files: list[Path]) -> pa.Table:
    return pa.table(
        {
            "table": pa.array([name] * len(files), pa.string()),
            "path": pa.array([str(f) for f in files], pa.string()),
            "mb": pa.array([round(f.stat().st_size / 1e6, 2) for f in files], pa.float64()),
        }
    )


def _fields(table: Table, spec_id: int) -> list[str]:
    return [f.name for f in table.specs()[spec_id].fields]


def _label(partition: dict[str, Any] | None, fields: list[str] | None = None) -> str:
    """``name=value/...`` of a file's own spec (the struct Iceberg returns spans every spec the table
    had, a field of another spec null there: left out, not shown as a null partition)."""
    values = partition or {}
    names = fields if fields is not None else list(values)
    return "/".join(f"{k}={'null' if values.get(k) is None else values[k]}" for k in names)


def _mb(sizes: pa.ChunkedArray) -> pa.Array:
    return pa.compute.round(pa.compute.divide(sizes.cast(pa.float64()), 1e6), 2)


def cell(value: Any) -> Any:
    """A value as a reader expects to see it: a map as ``{"k": "v"}`` (Arrow hands maps out as lists
    of pairs), a list as JSON, everything else as it is."""
    if isinstance(value, list) and all(isinstance(v, tuple) and len(v) == 2 for v in value) and value:
        return json.dumps(dict(value), ensure_ascii=False, default=str)
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return value


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    return aligned(columns, rows, left=len(columns), null="NULL") + f"\n({len(rows)} rows)"


def run(workdir: Path, sql: str, fmt: str) -> int:
    layout = LocalLayout(workdir.resolve())
    if not (layout.output / "_catalog" / "catalog.db").exists() and not published_files(layout.output):
        raise ConfigError(
            f"WORKDIR={workdir}: no table here (no {layout.output}/_catalog, no Parquet files); "
            f"run make run WORKDIR={workdir} first, or pass the WORKDIR you ran it with"
        )
    con = connect(layout.output)
    # an Iceberg table has a spec per partition; a hive-parquet one (beside an Iceberg load history) none
    iceberg = "spec_id" in {row[0] for row in con.execute("DESCRIBE meta.partitions").fetchall()}
    try:
        statements = con.extract_statements(sql or (DEFAULT_SQL if iceberg else HIVE_SQL))
    except duckdb.Error as exc:
        raise ConfigError(f"SQL: {str(exc).splitlines()[0]}") from exc
    for n, statement in enumerate(statements):
        if n:
            print()
        _print(con, statement, fmt)
    return 0


def _print(con: duckdb.DuckDBPyConnection, statement: Any, fmt: str) -> None:
    try:
        relation = con.sql(statement.query)
    except duckdb.CatalogException as exc:  # a table name this WORKDIR does not have: say which it has
        views = sorted(
            {row[0] for row in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        )
        shown = ", ".join(v for v in views if not v.startswith("_"))
        raise ConfigError(f"SQL: {str(exc).splitlines()[0]} (this WORKDIR's views: {shown})") from exc
    except duckdb.Error as exc:
        raise ConfigError(f"SQL: {str(exc).splitlines()[0]}") from exc
    if relation is None:  # a statement without rows
        return
    columns = list(relation.columns)
    # through Arrow, in batches: time zones without pytz, decimals and maps as they are, and a
    # SELECT * of a big table neither held whole nor printed whole as a table
    batches = relation.to_arrow_reader(batch_size=10_000)
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        for batch in batches:
            writer.writerows(_rows_of(batch))
        return
    rows: list[list[Any]] = []
    for batch in batches:
        rows += _rows_of(batch.slice(0, SHOWN_ROWS + 1 - len(rows)))
        if len(rows) > SHOWN_ROWS:
            break
    if len(rows) <= SHOWN_ROWS:
        print(render(columns, rows))
        return
    table = render(columns, rows[:SHOWN_ROWS]).rsplit("\n", 1)[0]
    print(f"{table}\n(the first {SHOWN_ROWS:,} rows of more: add LIMIT, or FORMAT=csv prints them all)")


def _rows_of(batch: pa.RecordBatch) -> list[list[Any]]:
    return [
        [cell(v) for v in row]
        for row in zip(*(batch.column(i).to_pylist() for i in range(batch.num_columns)), strict=True)
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="query", description=__doc__)
    p.add_argument("--workdir", type=user_path, default=Path(".work"))
    p.add_argument("--sql", default="", help="the query (default: rows and files per partition)")
    p.add_argument("--format", choices=("table", "csv"), default="table")
    args = p.parse_args(argv)
    return run(args.workdir, args.sql, args.format)


if __name__ == "__main__":
    sys.exit(main())
