"""Issue 27: a batch over many partitions writes one file per partition, holds a bounded number of
files open per task, says how many partitions it touched, and compacts like any other table."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import metrics as M
from glue_processor.metrics.convert import record_datums
from glue_processor.table.compact import compact
from glue_processor.table.read import current_files, load
from tests.glue_processor.table.test_declared import partition_dir
from tests.glue_processor.test_batch import Env
from tests.helpers import read_rows

DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")
KINDS = ("a", "b", "c")


ROWS = 900


def _body(batch: int, first: int = 0, rows: int = ROWS) -> bytes:
    # rows of every partition interleaved; ~2 KB each, so 900 rows are ~200 KiB per partition (under
    # glue_processor.write.shared.OWN_BYTES: the task's shared file) and 2,700 are ~600 KiB (a part of
    # its own)
    lines = [
        {
            "ts": f"{DAYS[i % 3]}T0{i % 10}:00:00Z",
            "kind": KINDS[(i // 3) % 3],
            "batch": batch,
            "i": i,
            "pad": "x" * 2000,
        }
        for i in range(first, first + rows)
    ]
    return "".join(json.dumps(r) + "\n" for r in lines).encode()


def test_partitions_from_shared_files_and_own_parts_are_one_file_each_and_compact_to_one(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glue_processor.write import stage

    # Given tasks that may keep only two files open, and batches of two objects whose rows span nine
    # partitions: one task's share of each partition is small (its shared file), the other's is not
    plans = []

    def plan_merge(*args: Any, **kwargs: Any) -> Any:
        plans.append(stage_plan_merge(*args, **kwargs))
        return plans[-1]

    stage_plan_merge = stage.plan_merge
    monkeypatch.setattr(stage, "plan_merge", plan_merge)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": {"ts": "timestamp"}}))
    env = Env(
        tmp_path,
        schema=schema.as_uri(),
        partition_by="day(ts),kind",
        max_partitions_per_batch="4",
        target_file_mb="1",
        max_open_files_per_task="2",
    )
    job = env.job(spark)
    records = [
        job.run(
            [
                env.manifest(
                    f"m{n}", [env.put(f"f{n}a.json", _body(n)), env.put(f"f{n}b.json", _body(n, ROWS, 3 * ROWS))]
                )
            ],
            n,
        )
        for n in range(3)
    ]
    # Then a partition's file was made of a range of a shared file and a part of its own
    mixed = [m for plan in plans for m in plan.merges if {p.shared is None for p in m.parts} == {True, False}]
    assert len(mixed) == 27, [[(p.uri, p.shared) for p in m.parts] for plan in plans for m in plan.merges]
    # And each batch published exactly one file per partition, and says it touched nine
    table = load(env.settings)
    per_partition = Counter(partition_dir(p) for p in current_files(table))
    assert len(per_partition) == 9 and set(per_partition.values()) == {3}  # 3 batches x 1 file
    assert [r.stats.partitions for r in records] == [9, 9, 9]
    assert [r.stats.output_files for r in records] == [9, 9, 9]
    # And past --max_partitions_per_batch (4) the batch is still whole, and its metric says by how much
    got = {
        d.name: d.value for d in record_datums(records[0], dimensions=env.settings.metric_dimensions, max_partitions=4)
    }
    assert got[M.PARTITIONS_WRITTEN.name] == 9 and got[M.PARTITIONS_PAST_BOUND.name] == 5
    rows = read_rows(tmp_path / "output")
    assert sorted((int(r["batch"]), int(r["i"])) for r in rows) == [(b, i) for b in range(3) for i in range(4 * ROWS)]
    # When the closed days are compacted
    report = compact(table, target_bytes=128 * 1024 * 1024, today=datetime.now(UTC).date() + timedelta(days=1))
    # Then every partition is one file, and every record is there once
    table.refresh()
    assert (report.rewritten, report.written) == (27, 9)
    assert Counter(partition_dir(p) for p in current_files(table)) == dict.fromkeys(per_partition, 1)
    rows = read_rows(tmp_path / "output")
    assert sorted((int(r["batch"]), int(r["i"])) for r in rows) == [(b, i) for b in range(3) for i in range(4 * ROWS)]
