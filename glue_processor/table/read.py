"""What a reader of the table sees: the data files of its current snapshot (for local queries,
tests and the reliability check; engines such as Athena read the table through the catalog)."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from glue_processor.settings import JobSettings
from glue_processor.table.catalog import open_catalog


def load(settings: JobSettings, table: str | None = None) -> Table:
    """One of the job's tables (default: its own, --table_name)."""
    return open_catalog(settings.catalog_uri).load_table((settings.database, table or settings.table_name))


def current_files(table: Table) -> list[str]:
    """Paths of the data files in the table's current snapshot (the table has no delete files: the
    job only appends, and compaction replaces files whole)."""
    if table.current_snapshot() is None:
        return []
    return sorted(task.file.file_path for task in table.scan().plan_files())


def local_file(path: str) -> Path:
    if not path.startswith("file://"):
        raise ValueError(f"{path} is not a local file")
    return Path(path.removeprefix("file://"))


def published_files(output: Path, *, database: str = "ingest", table_name: str = "events") -> list[Path]:
    """The data files a reader sees under a local output root: the Iceberg table's current snapshot
    when the root has the embedded catalog, else the visible (no ``_``/``.`` path part) Parquet files."""
    catalog_db = output / "_catalog" / "catalog.db"
    if catalog_db.exists():
        try:
            table = open_catalog(f"sqlite:///{catalog_db}").load_table((database, table_name))
        except NoSuchTableError:  # not written yet (or not a table of this run's routing)
            return []
        return [local_file(p) for p in current_files(table)]
    if not output.exists():
        return []
    return sorted(
        p
        for p in output.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(output).parts)
    )
