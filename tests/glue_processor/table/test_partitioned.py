"""Issue 27: a batch over many partitions writes one file per partition, holds a bounded number of
files open per task, says how many partitions it touched, and compacts like any other table."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import metrics as M
from glue_processor.metrics.convert import record_datums
from glue_processor.table.compact import compact
from glue_processor.table.read import current_files, load
from tests.glue_processor.shared.test_declared import partition_dir
from tests.glue_processor.test_batch import Env
from tests.helpers import declared, merge_plans, read_rows

DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")
KINDS = ("a", "b", "c")


ROWS = 900


def _body(batch: int, first: int = 0, rows: int = ROWS) -> bytes:
    # rows of every partition interleaved; ~2 KB each, so 900 rows are ~200 KiB per partition (under
    # glue_processor.shared.spill.OWN_BYTES: the task's shared file) and 2,700 are ~600 KiB (a part of
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
    # Given tasks that may keep only two files open, and batches of two objects whose rows span nine
    # partitions: one task's share of each partition is small (its shared file), the other's is not
    plans = merge_plans(monkeypatch)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": {"ts": "timestamp", "kind": "string"}}))
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


# -- past --partition_limit_per_batch ------------------------------------------------------------
def _kinds(rows: dict[str | None, int], seed: int) -> bytes:
    # ~2 KB rows: 300 and more of a kind are over OWN_BYTES (a part of their own), a few are shared rows
    lines = [
        {"kind": kind, "i": i, "pad": "x" * 2000} if kind else {"i": i, "pad": "x" * 2000}
        for kind, count in rows.items()
        for i in range(count)
    ]
    random.Random(seed).shuffle(lines)  # every partition's rows spread over the object
    return "".join(json.dumps(r) + "\n" for r in lines).encode()


FIRST: dict[str | None, int] = {"a": 600, "b": 450, "c": 300}
SECOND: dict[str | None, int] = {"d": 400, "f": 5, "g": 4, None: 5}


def test_past_the_partition_limit_the_smallest_partitions_rows_join_the_null_partition_with_their_values(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.expressions import EqualTo, IsNull

    plans = merge_plans(monkeypatch)

    # Given a table partitioned by kind, a limit of four partitions a batch, and two objects whose tasks
    # stay within it (a, b, c; d, f, g and rows without a kind), seven partitions in all
    env = Env(
        tmp_path,
        schema=declared(tmp_path, kind="string"),
        partition_by="kind",
        max_partitions_per_batch="2",
        partition_limit_per_batch="4",
        target_file_mb="4",
    )
    entries = [env.put("one.json", _kinds(FIRST, 1)), env.put("two.json", _kinds(SECOND, 2))]
    record = env.job(spark).run([env.manifest("m0", entries)], 0)
    # Then the batch kept the three largest (a, b, d) and the null partition; c's part of its own and
    # f and g's shared rows joined the null partition's file, rewritten, next to its own rows
    (null,) = [m for plan in plans for m in plan.merges if m.partition == "kind=null"]
    assert {(p.shared is None, p.overflow) for p in null.parts} == {(True, True), (False, True), (False, False)}
    table = load(env.settings)
    assert Counter(partition_dir(p) for p in current_files(table)) == dict.fromkeys(
        ("kind=a", "kind=b", "kind=d", "kind=null"), 1
    )
    rows = FIRST | SECOND
    moved = {k: rows[k] for k in ("c", "f", "g")}
    assert record.stats.partitions == 4
    assert record.stats.overflow_records == sum(moved.values())
    # And every row is there once; a moved row's kind is in _extra, its column NULL; the others as they were
    got = Counter()
    for r in read_rows(tmp_path / "output"):
        extra = dict(r["_extra"] or [])
        got[(r["kind"], extra.get("kind"))] += 1
        assert set(extra) <= {"kind"}
    assert got == Counter(
        {
            **{(k, None): rows[k] for k in ("a", "b", "d")},
            (None, None): rows[None],
            **{(None, k): n for k, n in moved.items()},
        }
    )
    # And a reader finds them where their files say: c's rows only with the null partition
    assert len(table.scan(row_filter=EqualTo("kind", "a")).to_arrow()) == rows["a"]
    assert len(table.scan(row_filter=EqualTo("kind", "c")).to_arrow()) == 0
    assert len(table.scan(row_filter=IsNull("kind")).to_arrow()) == rows[None] + sum(moved.values())
    # And the metric says how many rows moved
    got_metrics = {d.name: d.value for d in record_datums(record, dimensions=env.settings.metric_dimensions)}
    assert got_metrics[M.PARTITION_OVERFLOW_RECORDS.name] == sum(moved.values())


def test_a_task_past_the_partition_limit_moves_the_rows_itself(spark: Any, tmp_path: Path) -> None:
    # Given one object of thirteen partitions (a the largest), and a limit of three
    env = Env(
        tmp_path,
        schema=declared(tmp_path, kind="string"),
        partition_by="kind",
        max_partitions_per_batch="2",
        partition_limit_per_batch="3",
        target_file_mb="4",
    )
    rows: dict[str | None, int] = {"a": 600, "b": 450, **{k: 3 + n for n, k in enumerate("cdefghijkl")}, None: 5}
    record = env.job(spark).run([env.manifest("m0", [env.put("f.json", _kinds(rows, 27))])], 0)
    # Then three partitions were written, every row once, and every moved row has its kind in _extra
    table = load(env.settings)
    written = Counter(partition_dir(p) for p in current_files(table))
    assert len(written) == 3 and "kind=null" in written and "kind=a" in written
    out = read_rows(tmp_path / "output")
    assert len(out) == sum(rows.values())
    moved = [r for r in out if r["kind"] is None and r["_extra"]]
    assert (
        record.stats.overflow_records
        == len(moved)
        == sum(rows.values()) - rows[None] - sum(rows[p.split("=")[1]] for p in written if p != "kind=null")
    )
    assert Counter(dict(r["_extra"])["kind"] for r in moved) == {
        k: n for k, n in rows.items() if k is not None and f"kind={k}" not in written
    }


def test_past_the_partition_limit_a_time_partition_s_value_is_kept_in_iso_8601(spark: Any, tmp_path: Path) -> None:
    # Given day(ts) over a declared timestamp, a limit of four, and late rows over twelve days (day 0 the largest)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": {"ts": "timestamp", "kind": "string"}}))
    env = Env(
        tmp_path,
        schema=schema.as_uri(),
        partition_by="day(ts)",
        max_partitions_per_batch="4",
        partition_limit_per_batch="4",
    )
    start = datetime(2026, 10, 1, 12, 0, 0, 500000, tzinfo=UTC)
    lines = [{"ts": (start + timedelta(days=d)).isoformat(), "d": d, "i": i} for d in range(12) for i in range(12 - d)]
    body = "".join(json.dumps(r) + "\n" for r in lines).encode()
    record = env.job(spark).run([env.manifest("m0", [env.put("f.json", body)])], 0)
    # Then days 0-2 keep their partitions, and the rows of days 3-11 are in the null one with their time
    table = load(env.settings)
    assert sorted(partition_dir(p) for p in current_files(table)) == [
        "ts_day=2026-10-01",
        "ts_day=2026-10-02",
        "ts_day=2026-10-03",
        "ts_day=null",
    ]
    assert record.stats.overflow_records == sum(12 - d for d in range(3, 12))
    out = read_rows(tmp_path / "output")
    assert len(out) == len(lines)
    for r in out:
        when = start + timedelta(days=int(r["d"]))
        if int(r["d"]) < 3:
            assert r["ts"] == when and r["_extra"] is None
        else:
            assert r["ts"] is None and dict(r["_extra"]) == {"ts": f"2026-10-{1 + int(r['d']):02d}T12:00:00.500000Z"}
