"""Each row's partition label, computed on distinct values, equals the per-row formatting."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pytest

from glue_processor.shared.partitioning import NULL, TIME_TRANSFORMS, Field, PartitionPlan


def per_row(plan: PartitionPlan, table: pa.Table) -> list[str]:
    """The labels as each row, formatted on its own, would have them."""
    out = []
    for row in table.to_pylist():
        parts = []
        for f in plan.fields:
            value = row[f.column]
            if value is None:
                text = NULL
            elif f.transform == "identity":
                text = str(value)
            else:
                text = value.strftime(TIME_TRANSFORMS[f.transform])
            parts.append(f"{f.name}={text}")
        out.append("/".join(parts))
    return out


START = datetime(2026, 11, 22, 22, 30, tzinfo=UTC)
TIMES = [START + timedelta(minutes=37 * i) for i in range(60)] + [None]
TABLE = pa.table(
    {
        "ts": pa.array(TIMES, pa.timestamp("us", tz="UTC")),
        "d": pa.array([None if t is None else date(2026, 1 + i % 12, 1 + i % 28) for i, t in enumerate(TIMES)]),
        "kind": pa.array([None if i % 7 == 0 else f"k{i % 3}" for i in range(len(TIMES))]),
    }
)


@pytest.mark.parametrize(
    "fields",
    [
        (Field("day", "ts", "ts", "ts_day"),),
        (Field("hour", "ts", "ts", "ts_hour"),),
        (Field("month", "d", "d", "d_month"),),
        (Field("year", "d", "d", "d_year"),),
        (Field("identity", "kind", "kind", "kind"),),
        (Field("day", "ts", "ts", "ts_day"), Field("identity", "kind", "kind", "kind")),
    ],
)
def test_labels_are_the_per_row_formatting(fields: tuple[Field, ...]) -> None:
    plan = PartitionPlan(fields)
    labels, nulls = plan.labels(TABLE)
    want = per_row(plan, TABLE)
    assert labels.to_pylist() == want
    assert nulls == sum(any(f"={NULL}" in part for part in label.split("/")) for label in want)
    assert len(labels.dictionary) == len(set(want))


@pytest.mark.parametrize(
    "fields",
    [
        (Field("day", "ts", "ts", "ts_day"),),
        (Field("identity", "kind", "kind", "kind"),),
        (Field("day", "ts", "ts", "ts_day"), Field("identity", "kind", "kind", "kind")),
    ],
)
def test_a_column_of_one_value_is_labelled_once_as_per_row(fields: tuple[Field, ...]) -> None:
    # a batch's _ingest_time: one value in every row (the labels are made once, not per row)
    table = pa.table(
        {
            "ts": pa.array([START] * 5000, pa.timestamp("us", tz="UTC")),
            "kind": pa.array(["k1"] * 5000),
        }
    )
    plan = PartitionPlan(fields)
    labels, nulls = plan.labels(table)
    assert labels.to_pylist() == per_row(plan, table) and nulls == 0
    assert len(labels.dictionary) == 1
    # one row differs, or one is null: per row again
    for odd in (START + timedelta(days=1), None):
        varied = table.set_column(0, "ts", pa.array([START] * 4999 + [odd], pa.timestamp("us", tz="UTC")))
        labels, nulls = plan.labels(varied)
        want = per_row(plan, varied)
        assert labels.to_pylist() == want and nulls == sum(f"={NULL}" in label for label in want)


def test_demoted_rows_are_in_the_null_partition_with_their_values_in_extra() -> None:
    from decimal import Decimal

    from glue_processor.shared.extra import EXTRA_TYPE, to_map

    # Given rows of a spec over a timestamp, a date, a bigint, a decimal, a boolean and a string,
    # one of them with an entry of _extra already, one with some values missing
    fields = (
        Field("day", "ts", "ts", "ts_day"),
        Field("identity", "d", "d", "d"),
        Field("identity", "n", "n", "n"),
        Field("identity", "big", "big", "big"),
        Field("identity", "ok", "ok", "ok"),
        Field("identity", "Kind", "kind", "kind"),  # a key whose column has another name
        Field("month", "ts", "ts", "ts_month"),  # a second field over the same column
    )
    plan = PartitionPlan(fields)
    stamp = datetime(2026, 11, 22, 22, 30, 1, 250000, tzinfo=UTC)
    table = pa.table(
        {
            "ts": pa.array([stamp, None], pa.timestamp("us", tz="UTC")),
            "d": pa.array([date(2026, 1, 2), None]),
            "n": pa.array([-9223372036854775808, 7], pa.int64()),
            "big": pa.array([Decimal("9223372036854775807"), None], pa.decimal128(19, 0)),
            "ok": pa.array([True, False]),
            "kind": pa.array(["a/b", "é"]),
            "other": pa.array(["x", "y"]),
            "_extra": to_map(["past"], [pa.array(["1", None])], 2).cast(EXTRA_TYPE),
        }
    )
    # When they are moved to the null partition
    moved = plan.demote(table)
    # Then every source column is NULL there, the others are as they were, and the labels say so
    assert moved.schema == table.schema
    for f in fields:
        assert moved.column(f.column).null_count == 2
    assert moved.column("other") == table.column("other")
    labels, nulls = plan.labels(moved)
    assert labels.dictionary.to_pylist() == [plan.null_label] and nulls == 2
    # And _extra holds each value under its key, as text, after what the row had
    assert [dict(m) if m is not None else None for m in moved.column("_extra").to_pylist()] == [
        {
            "past": "1",
            "ts": "2026-11-22T22:30:01.250000Z",
            "d": "2026-01-02",
            "n": "-9223372036854775808",
            "big": "9223372036854775807",
            "ok": "true",
            "Kind": "a/b",
        },
        {"n": "7", "ok": "false", "Kind": "é"},
    ]
    assert plan.null_label == "ts_day=null/d=null/n=null/big=null/ok=null/kind=null/ts_month=null"


def test_a_demoted_value_never_makes_a_key_twice_in_a_row_s_extra() -> None:
    from glue_processor.shared.extra import to_map

    # Given day(_event_time), and a row whose _extra holds a producer's own _event_time (past the bound)
    plan = PartitionPlan((Field("day", "_event_time", "_event_time", "_event_time_day"),))
    stamp = datetime(2026, 11, 22, tzinfo=UTC)
    table = pa.table(
        {
            "_event_time": pa.array([stamp, stamp], pa.timestamp("us", tz="UTC")),
            "_extra": to_map(["_event_time"], [pa.array(["producer's", None])], 2),
        }
    )
    moved = plan.demote(table)
    # Then that row keeps the producer's entry alone; the other row has the job's value
    assert moved.column("_event_time").null_count == 2
    assert [list(m) for m in moved.column("_extra").to_pylist()] == [
        [("_event_time", "producer's")],
        [("_event_time", "2026-11-22T00:00:00.000000Z")],
    ]
