"""The job's transactions work out their staged metadata once per staged state (issue 45), and it is
the metadata pyiceberg works out (apache/iceberg-python#3302, #3784: the same cache upstream).

These tests read pyiceberg's own ``update_table_metadata`` and the transaction's staged updates: a
pyiceberg upgrade that changes either fails here first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table import Transaction
from pyiceberg.table.update import update_table_metadata
from pyiceberg.types import StringType

from glue_processor.table.transaction import CachedTransaction, transaction
from tests.glue_processor.table.test_expiry import _catalog, _table


def _comparable(metadata: Any) -> dict[str, Any]:
    out: dict[str, Any] = metadata.model_dump()
    for name in ("last_updated_ms", "last-updated-ms"):  # stamped with the time it is worked out
        out.pop(name, None)
    return out


def test_the_cached_metadata_is_pyicebergs_after_every_staged_update(tmp_path: Path) -> None:
    table = _table(_catalog(tmp_path), tmp_path)
    for n in range(5):
        table.append(pa.table({"n": [str(n)]}))
    tx = transaction(table)
    assert isinstance(tx, CachedTransaction)
    # nothing staged: the table's own metadata
    assert tx.table_metadata is table.metadata
    with tx.update_schema() as update:
        update.add_column("extra", StringType())
    after_schema = tx.table_metadata
    assert _comparable(after_schema) == _comparable(update_table_metadata(table.metadata, tx._updates))
    assert tx.table_metadata is after_schema  # read again: the same state, worked out once
    tx.append(pa.table({"n": ["5"], "extra": ["x"]}))
    assert _comparable(tx.table_metadata) == _comparable(update_table_metadata(table.metadata, tx._updates))
    assert tx.table_metadata is not after_schema
    tx.commit_transaction()
    table.refresh()
    assert sorted(table.scan().to_arrow().column("n").to_pylist()) == [str(n) for n in range(6)]
    assert "extra" in table.schema().column_names


def test_an_append_works_out_the_staged_metadata_twice_where_pyiceberg_does_it_a_dozen_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyiceberg.table as pyiceberg_table

    table = _table(_catalog(tmp_path), tmp_path)
    table.append(pa.table({"n": ["0"]}))
    calls: list[int] = []
    real = pyiceberg_table.update_table_metadata

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pyiceberg_table, "update_table_metadata", counted)

    def append(tx: Transaction) -> int:
        calls.clear()
        with tx as staged, staged.update_snapshot().fast_append() as append:
            for task in table.scan().plan_files():
                append.append_data_file(task.file)
        table.refresh()
        return len(calls)

    plain, cached = append(Transaction(table)), append(transaction(table))
    assert plain >= 8 and cached <= 2
