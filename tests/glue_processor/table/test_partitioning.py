"""Each row's partition label, computed on distinct values, equals the per-row formatting."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pytest

from glue_processor.table.partitioning import NULL, TIME_TRANSFORMS, Field, PartitionPlan


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
