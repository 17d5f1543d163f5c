"""A smaller round of the fault-injection run (`make reliability` does 20 kills)."""

from __future__ import annotations

from pathlib import Path

import pytest

from glue_processor.local.chaos import run_chaos

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize(
    ("table_format", "kills", "routed"), [("iceberg", 4, False), ("hive-parquet", 2, False), ("iceberg", 4, True)]
)
def test_sigkill_at_random_moments_loses_and_duplicates_nothing(
    tmp_path: Path, table_format: str, kills: int, routed: bool
) -> None:
    # routed: three datasets to three tables, every row in its own table exactly once
    report = run_chaos(tmp_path, kills=kills, seed=5, table_format=table_format, routed=routed)
    print(report.text())
    assert report.kills >= kills
    assert (report.duplicates, report.lost, report.unexpected) == (0, 0, 0)
    assert report.records_out == report.records_in > 0
