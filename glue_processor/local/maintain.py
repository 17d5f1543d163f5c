"""``make compact``: maintain the local tables as the table optimizers and the job do on AWS.

Every table of the run (a routing file writes several, and the load history): small files of closed
days packed into ~128 MB files, snapshots past the table's retention expired with the files only
they held, orphan files deleted. When nothing is compacted, it says why.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import timedelta
from pathlib import Path

from contracts.exceptions import ConfigError
from glue_processor.local.errors import Parser, cli, user_path
from glue_processor.local.layout import LocalLayout
from glue_processor.local.text import counted
from glue_processor.table.catalog import open_catalog
from glue_processor.table.compact import maintain

maintain_doc = __doc__


@cli
def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    p = Parser(prog="compact", description=maintain_doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workdir", type=user_path, default=Path(".work"))
    p.add_argument("--target-mb", type=int, default=128)
    p.add_argument("--orphan-age-hours", type=float, default=24.0)
    p.add_argument("--include-open", action="store_true", help="compact today's partition too (make compact OPEN=1)")
    args = p.parse_args(argv)
    layout = LocalLayout(args.workdir.resolve())
    output = layout.output
    catalog_db = output / "_catalog" / "catalog.db"
    if not catalog_db.exists() and _table_format(layout) == "hive-parquet":
        raise ConfigError(
            f"WORKDIR={args.workdir} holds a hive-parquet table: make compact packs Iceberg tables only "
            "(TABLE_FORMAT=iceberg, the default, in a WORKDIR of its own)"
        )
    if not catalog_db.exists():
        raise ConfigError(
            f"WORKDIR={args.workdir}: no Iceberg table here (no {catalog_db}); "
            f"run make run WORKDIR={args.workdir} first"
        )
    catalog = open_catalog(f"sqlite:///{catalog_db}")
    # every table of the run (a routing file writes several), as the table optimizers maintain each
    for ident in sorted(catalog.list_tables("ingest")):
        table = catalog.load_table(ident)
        report = maintain(
            table,
            target_bytes=args.target_mb * 1024 * 1024,
            orphan_age=timedelta(hours=args.orphan_age_hours),
            output_uri=output.as_uri(),
            include_open=args.include_open,
        )
        name = ".".join(ident)
        done = (
            f"compacted {counted(report.rewritten, 'small file')} in {counted(report.partitions, 'partition')} "
            f"into {report.written} (table files {report.files_before} -> {report.files_after}, "
            f"snapshot {report.snapshot_id})"
            if report.rewritten
            else f"nothing to compact: {report.why_not}"
        )
        print(
            f"{name}: {done}; expired {counted(report.expired_snapshots, 'snapshot')}; "
            f"deleted {counted(report.orphans_deleted, 'orphan file')}"
        )
    return 0


def _table_format(layout: LocalLayout) -> str | None:
    """The table format make run kept for this WORKDIR (``state/table.json``), if any."""
    try:
        kept = json.loads(layout.table_settings.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return kept.get("table_format") if isinstance(kept, dict) else None


if __name__ == "__main__":
    sys.exit(main())
