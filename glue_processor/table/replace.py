"""One commit that adds a batch's rows and removes those of the versions they replace.

A share that replaces or retracts versions (docs/mirror.md) is committed as one overwrite: the files
holding the old rows go, the files the write stage made of their other rows come in, and the batch's
new files with them, so a reader sees the old rows or the new ones, never both and never neither.

The write stage planned its rewrites on the table as it was then. At the commit the table is looked
at again: the files that may hold the removed rows now (:func:`glue_processor.table.locate.files_holding`).
One the plan rewrote is replaced by its rewrite; one it did not know (a compaction merged a planned
file in between) is rewritten here, on the driver, the same way; a planned file no longer there is
nothing to do (its rows are in one of the others). So what the commit removes is always what the
table holds at that moment, and a replay after a crash commits the same.

pyiceberg writes the files a commit adds under the table's current partition spec, so a rewrite of a
file of an earlier spec is committed first, in the same transaction, under that spec (the table's
default spec is set back to it, then forward again): readers see one commit; its history shows two
snapshots.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction

from contracts.ledger import Replaced, TableShare
from glue_processor.keys.state import Segment
from glue_processor.table.datafiles import DataFiles, WrittenFile
from glue_processor.table.locate import files_holding
from glue_processor.write.rewrite import Removal, RewriteSpec, rewrite

logger = logging.getLogger(__name__)


@dataclass
class Removed:
    """What a commit removed: rows and the bytes of the files it rewrote."""

    rows: int = 0
    files: int = 0
    bytes: int = 0
    on_driver: int = 0  # files rewritten at the commit (the plan's were gone or unknown)


def removals(replaced: tuple[Replaced, ...]) -> tuple[Removal, ...]:
    return tuple(Removal(r.source_uri, r.batches, r.from_line) for r in replaced if r.batches)


def segments(replaced: tuple[Replaced, ...]) -> list[Segment]:
    return [Segment(query_id="", batch_id=b, partitions=r.partitions) for r in replaced for b in r.batches]


def stage_replacing(
    tx: Transaction,
    table: Table,
    share: TableShare,
    written: Mapping[str, WrittenFile],
    *,
    properties: dict[str, str],
    redo_dir: str,
) -> Removed:
    """Stage on ``tx`` the share's new files and the removal of its replaced versions' rows."""
    done = Removed()
    gone = removals(share.replaced)
    live = {f.file_path: f for f in files_holding(table, segments(share.replaced))} if gone else {}
    planned = {r.old: r for r in share.rewrites}
    # spec -> (an old file, the file of its other rows: (uri, bytes, what its task worked out), or None)
    swaps: dict[int, list[tuple[DataFile, tuple[str, int, WrittenFile | None] | None]]] = {}
    for path, old in sorted(live.items()):
        plan = planned.get(path)
        if plan is not None:
            if not plan.rows_removed:
                continue
            new = (plan.new.final, plan.new.bytes, written.get(plan.new.final)) if plan.new else None
            done.rows += plan.rows_removed
        else:  # a file the plan did not know: rewritten here
            name = hashlib.sha256(path.encode()).hexdigest()[:24]
            result = rewrite(RewriteSpec(path, old.file_size_in_bytes, gone, f"{redo_dir}/redo-{name}.parquet"))
            if not result.rows_removed:
                continue
            done.on_driver += 1
            new = (result.new.uri, result.new.bytes, WrittenFile(result.new.footer)) if result.new else None
            done.rows += result.rows_removed
        swaps.setdefault(old.spec_id, []).append((old, new))
        done.files += 1
        done.bytes += old.file_size_in_bytes
    current = tx.table_metadata.default_spec_id
    for spec_id, pairs in sorted(swaps.items()):
        if spec_id == current:
            continue
        _as_spec(tx, table, spec_id)
        earlier_entries = DataFiles(table.io, tx.table_metadata)  # the partition under that spec
        with tx.update_snapshot(snapshot_properties=properties).overwrite() as earlier:
            for old, new in pairs:
                earlier.delete_data_file(old)
                if new is not None:
                    earlier.append_data_file(earlier_entries.entry(*new))
    if current != tx.table_metadata.default_spec_id:
        _as_spec(tx, table, current)
    entries = DataFiles(table.io, tx.table_metadata)
    with tx.update_snapshot(snapshot_properties=properties).overwrite() as overwrite:
        for old, new in swaps.get(current, []):
            overwrite.delete_data_file(old)
            if new is not None:
                overwrite.append_data_file(entries.entry(*new))
        for f in share.data_files:
            overwrite.append_data_file(entries.entry(f.final, f.bytes, written.get(f.final)))
    return done


def _as_spec(tx: Transaction, table: Table, spec_id: int) -> None:
    """Make ``spec_id`` the table's default spec again (pyiceberg reuses a spec equal to one the
    table has: UpdateSpec)."""
    spec = table.specs()[spec_id]
    schema = table.schema()
    with tx.update_spec() as update:
        for field in tx.table_metadata.spec().fields:
            update.remove_field(field.name)
        for field in spec.fields:
            update.add_field(schema.find_column_name(field.source_id) or "", field.transform, field.name)
    if tx.table_metadata.default_spec_id != spec_id:
        raise ValueError(f"partition spec {spec_id} could not be made the table's default again")
