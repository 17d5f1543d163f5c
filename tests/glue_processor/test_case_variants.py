"""A key that differs from one of the table's columns only by case (``Kind`` after ``kind``) is no
new column: engines and the Glue catalog resolve names case-insensitively, so it would have been
named ``Kind`` and the old key's column renamed ``kind__2`` from that batch on. Before, one record
with it moved every later value of ``kind`` to another column, and under ``--partition_by kind``
failed every attempt of its batch (``KeyError: 'Field "kind" does not exist'``): a wedged stream.
Its values now go to ``_extra`` under their own key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyiceberg.expressions import EqualTo, IsNull

from glue_processor.commit.publication import PublishRefused, refused
from glue_processor.table.read import load
from tests.glue_processor.test_batch import Env
from tests.helpers import declared


def _rows(table: Any, expr: Any = None) -> list[dict[str, Any]]:
    scan = table.scan() if expr is None else table.scan(row_filter=expr)
    return sorted(scan.to_arrow().to_pylist(), key=lambda r: int(r["i"]))


def test_a_case_variant_of_a_known_column_does_not_rename_it(spark: Any, tmp_path: Path) -> None:
    # Given a table whose records had "kind"
    env = Env(tmp_path)
    job = env.job(spark)
    job.run([env.manifest("m0", [env.put("f0.json", b'{"kind": "a", "i": 0}\n')])], 0)
    # When a later batch has "kind" and "Kind"
    job.run([env.manifest("m1", [env.put("f1.json", b'{"kind": "b", "i": 1}\n{"Kind": "B", "i": 2}\n')])], 1)
    # Then "kind" keeps its column, no column differs from it only by case, and "Kind" is in _extra
    table = load(env.settings)
    names = [f.name for f in table.schema().fields]
    assert [n for n in names if n.lower().startswith("kind")] == ["kind"]
    rows = _rows(table)
    assert [r["kind"] for r in rows] == ["a", "b", None]
    assert [dict(r["_extra"] or {}) for r in rows] == [{}, {}, {"Kind": "B"}]


def test_of_case_variants_new_in_one_batch_the_key_in_more_rows_keeps_the_name(spark: Any, tmp_path: Path) -> None:
    # Given a first batch whose first file has one stray "Kind" (first in sorted order and in the
    # batch) and whose second has "kind" on every line (a newcomer's backfill named the dataset's
    # column kind__2, and SQL's kind read the stray key's column)
    env = Env(tmp_path)
    job = env.job(spark)
    stray = env.put("a.json", b'{"Kind": "stray", "i": 0}\n')
    lines = b"".join(b'{"kind": "k%d", "i": %d}\n' % (i, i) for i in range(1, 8001))
    job.run([env.manifest("m0", [stray, env.put("b.json", lines)])], 0)
    # Then "kind" is the column, with all its values; "Kind" is in _extra under its own key
    table = load(env.settings)
    names = [f.name for f in table.schema().fields]
    assert [n for n in names if n.lower().startswith("kind")] == ["kind"]
    rows = _rows(table)
    assert [r["kind"] for r in rows] == [None, *(f"k{i}" for i in range(1, 8001))]
    assert dict(rows[0]["_extra"] or {}) == {"Kind": "stray"}
    # And a later batch's "kind" lands in the same column, its "Kind" in _extra
    job.run([env.manifest("m1", [env.put("c.json", b'{"kind": "later", "i": 8001}\n{"Kind": "K", "i": 8002}\n')])], 1)
    rows = _rows(load(env.settings))
    assert [(r["kind"], dict(r["_extra"] or {})) for r in rows[-2:]] == [("later", {}), (None, {"Kind": "K"})]


def test_a_case_variant_of_the_partition_key_cannot_stop_the_stream(spark: Any, tmp_path: Path) -> None:
    # Given a table partitioned by kind, and a batch with a record that has "Kind" instead
    env = Env(tmp_path, schema=declared(tmp_path, kind="string"), partition_by="kind")
    body = b'{"kind": "a", "i": 1}\n{"Kind": "B", "i": 2}\n'
    # When the batch runs, Then it is published, the record in the null partition with its value kept
    record = env.job(spark).run([env.manifest("m0", [env.put("f.json", body)])], 0)
    assert record.stats.records_out == 2
    table = load(env.settings)
    assert [r["i"] for r in _rows(table, EqualTo("kind", "a"))] == ["1"]
    (other,) = _rows(table, IsNull("kind"))
    assert other["i"] == "2" and dict(other["_extra"]) == {"Kind": "B"}


def test_new_case_variants_never_take_the_name_of_a_known_column(spark: Any, tmp_path: Path) -> None:
    # Given a table whose records had the key "kind__2" (its column is named so)
    env = Env(tmp_path)
    job = env.job(spark)
    job.run([env.manifest("m0", [env.put("f0.json", b'{"kind__2": "k2", "i": 0}\n')])], 0)
    # When a later batch brings "kind" and "Kind", both new (the second would be suffixed "__2")
    body = b'{"kind": "a", "i": 1}\n{"Kind": "B", "i": 2}\n{"kind__2": "k2", "i": 3}\n'
    job.run([env.manifest("m1", [env.put("f1.json", body)])], 1)
    # Then "kind__2" keeps its column and its values alone, and no two columns differ only by case
    table = load(env.settings)
    names = [f.name for f in table.schema().fields]
    assert len({n.lower() for n in names}) == len(names)
    rows = _rows(table)
    assert [r["kind__2"] for r in rows] == ["k2", None, None, "k2"]
    # And every value is kept, under its own key: a column, else _extra
    for r in rows:
        values = {k: v for k, v in r.items() if k.lower().startswith("kind") and v is not None}
        values |= dict(r["_extra"] or {})
        assert values == {1: {"kind": "a"}, 2: {"Kind": "B"}}.get(int(r["i"]), {"kind__2": "k2"}), r


def test_a_key_named_as_a_field_of_the_job_s_maps_is_no_column(spark: Any, tmp_path: Path) -> None:
    """Iceberg indexes nested names spelled out (``_extra.key``, ``_rescued.value``): a column so
    named was refused, and with it every object of the batch, another producer's too; and Spark
    binds filters by lower-case name by default, so ``_Extra.Key`` is no column either."""
    schema = tmp_path / "schema.json"
    schema.write_text('{"columns": {"n": "bigint"}}')
    env = Env(tmp_path, schema=schema.as_uri())
    good = b"".join(b'{"i": %d, "n": 1}\n' % i for i in range(3))
    odd = (
        b'{"i": 9, "_extra.key": "k", "_rescued.value": "r", "_extra.key_value.key": "p", '
        b'"_Extra.Key": "K", "n": "x"}\n'
    )
    record = env.job(spark).run([env.manifest("m0", [env.put("good.json", good), env.put("odd.json", odd)])], 0)
    # Then every row is in the table, those keys' values in _extra under their own names
    assert record.stats.records_out == 4
    rows = _rows(load(env.settings))
    assert [r["i"] for r in rows] == ["0", "1", "2", "9"]
    extra = {"_extra.key": "k", "_rescued.value": "r", "_extra.key_value.key": "p", "_Extra.Key": "K"}
    assert dict(rows[3]["_extra"]) == extra and "_Extra.Key" not in rows[3]
    assert dict(rows[3]["_rescued"]) == {"n": "x"}


@pytest.mark.parametrize(("partition_by", "key"), [("", "ingest_day"), ("day(ts)", "ts_day")])
def test_a_key_named_as_a_time_partition_field_is_no_column(
    spark: Any, tmp_path: Path, partition_by: str, key: str
) -> None:
    """Iceberg lets no column share a time partition's name (``ingest_day`` by default): its commit
    failed with a ValueError that was retried for ever, every later batch held back behind it."""
    schema = tmp_path / "schema.json"
    schema.write_text('{"columns": {"ts": "timestamp"}}')
    env = Env(tmp_path, schema=schema.as_uri(), **({"partition_by": partition_by} if partition_by else {}))
    good = b'{"i": 0, "ts": "2026-11-25T10:00:00Z"}\n'
    odd = b'{"i": 1, "ts": "2026-11-25T11:00:00Z", "%s": "2024-01-02"}\n' % key.encode()
    record = env.job(spark).run([env.manifest("m0", [env.put("good.json", good), env.put("odd.json", odd)])], 0)
    # Then both rows are in the table, the key's value in _extra under its own name
    assert record.stats.records_out == 2
    rows = _rows(load(env.settings))
    assert [dict(r["_extra"] or {}) for r in rows] == [{}, {key: "2024-01-02"}]
    assert key not in rows[0]


def test_a_share_whose_columns_would_take_a_time_partition_s_name_is_refused_not_retried(
    spark: Any, tmp_path: Path
) -> None:
    # Given a share whose keys name a column as the table's partition field (a share committed by a
    # job before the parse rule, or any way round it)
    env = Env(tmp_path)
    job = env.job(spark)
    record = job.run([env.manifest("m0", [env.put("f.json", b'{"i": 1}\n')])], 0)
    (share,) = record.tables
    odd = share.model_copy(update={"keys": (*share.keys, "ingest_day")})
    # When the sink checks it (before the commit record, and again at publication)
    # Then it is refused for its content, not left to fail at the commit and be retried
    with pytest.raises(PublishRefused, match="partition fields: \\['ingest_day'\\]") as refused_with:
        job.tables.sink(share.table).check(odd)
    assert refused(refused_with.value)
    job.tables.sink(share.table).check(share)  # the share as it was passes


def test_case_losers_weigh_every_task_and_leave_known_and_held_keys_alone() -> None:
    from glue_processor.read.outcome import case_losers
    from glue_processor.read.task import TaskResult
    from glue_processor.shared.spec import FileOutcome

    def task(*values: tuple[str, int]) -> TaskResult:
        return TaskResult(0, (), (), (), new_key_values=values)

    def found(*keys: str) -> FileOutcome:
        return FileOutcome("u", "ingested", new_keys=keys)

    # more values across the batch win, whichever task or object brought the key first
    objects = [found("Kind"), found("kind")]
    assert case_losers([task(("Kind", 2)), task(("kind", 1)), task(("kind", 2))], objects, known=()) == {"Kind"}
    # a tie goes to the lower case; three variants leave two losers
    assert case_losers([task(("ID", 1), ("id", 1), ("Id", 1))], [found("ID", "id", "Id")], known=()) == {"ID", "Id"}
    # a key with no value counted (only NULLs: no task counts it) still competes, and loses to one with values
    assert case_losers([task(("KIND", 1))], [found("kind"), found("KIND")], known=()) == {"kind"}
    # a variant of a known or held key is not a new key's rival here (the parse sends it to _extra)
    both = [found("kind", "KIND")]
    assert case_losers([task(("kind", 1), ("KIND", 9))], both, known=("KIND",)) == frozenset()
    assert case_losers([task(("kind", 1), ("KIND", 9))], both, known=(), held=("KIND",)) == frozenset()
    # keys that case-fold alike but differ otherwise (the Kelvin sign) still get one winner, by a total order
    kelvin = "\u212aind"
    assert case_losers([task(("Kind", 1), (kelvin, 1))], [found(kelvin, "Kind")], known=()) == case_losers(
        [task((kelvin, 1), ("Kind", 1))], [found("Kind", kelvin)], known=()
    )
