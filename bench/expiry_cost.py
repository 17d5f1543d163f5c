"""What the job's snapshot expiry reads, against the reachability diff it replaced.

An embedded-catalog table of ``--snapshots`` one-row appends, every file compacted into one after
each ``--compact-every`` of them (an overwrite whose manifests record the replaced files as
DELETED); then the oldest ``--expire`` snapshots expire (``glue_processor/table/expiry.py``),
reading through a FileIO that counts the manifest lists and manifests it opens. For comparison,
the same count for one ``inspect.all_data_files()`` (the diff took one before and one after).
Local disk and SQLite: on S3 each read is a GET.

    .venv/bin/python -m bench.expiry_cost --snapshots 400 --compact-every 50 --expire 60
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.table import Table


class CountingIO(FileIO):
    def __init__(self, inner: FileIO) -> None:
        super().__init__(inner.properties)
        self.inner, self.lists, self.manifests = inner, 0, 0

    def new_input(self, location: str) -> InputFile:
        name = location.rsplit("/", 1)[-1]
        if name.startswith("snap-"):
            self.lists += 1
        elif name.endswith(".avro"):
            self.manifests += 1
        return self.inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        return self.inner.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.inner.delete(location)


def _counted(table: Table) -> tuple[Table, CountingIO]:
    io = CountingIO(table.io)
    return Table(table.name(), table.metadata, table.metadata_location, io, table.catalog), io


def main(argv: list[str] | None = None) -> int:
    from glue_processor.table.catalog import TABLE_PROPERTIES, open_catalog
    from glue_processor.table.compact import compact
    from glue_processor.table.expiry import expire_snapshots

    p = argparse.ArgumentParser(prog="expiry_cost", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--snapshots", type=int, default=400)
    p.add_argument("--compact-every", type=int, default=50)
    p.add_argument("--expire", type=int, default=60)
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="expiry-cost-"))
    catalog = open_catalog(f"sqlite:///{root}/catalog.db")
    catalog.create_namespace("ingest")
    schema = pa.schema([("n", pa.string())])
    table = catalog.create_table(
        ("ingest", "t"), schema=schema, location=(root / "t").as_uri(), properties=TABLE_PROPERTIES
    )
    for n in range(args.snapshots):
        if n and n % args.compact_every == 0:
            compact(table, target_bytes=128 * 1024 * 1024, include_open=True)
            table.refresh()
        else:
            table.append(pa.table({"n": [str(n)]}))
    total = len(table.metadata.snapshots)
    diff, io = _counted(table)
    started = time.monotonic()
    diff.inspect.all_data_files()
    print(
        f"reachability diff, one side: {io.lists} manifest lists, {io.manifests} manifests, "
        f"{time.monotonic() - started:.2f} s"
    )
    counted, io = _counted(table)
    started = time.monotonic()
    done = expire_snapshots(
        counted, max_age=timedelta(0), keep=total - args.expire, now=datetime.now(UTC) + timedelta(seconds=5)
    )
    print(
        f"expiry of the oldest {done.snapshots} of {total} snapshots: {io.lists} manifest lists, {io.manifests} "
        f"manifests, {done.deleted} files deleted, {time.monotonic() - started:.2f} s (commit and deletes included)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
