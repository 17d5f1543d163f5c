"""A smaller round of the fault-injection run (`make reliability` does 20 kills)."""

from __future__ import annotations

from pathlib import Path

import pytest

from glue_processor.local.chaos import run_chaos

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    report = run_chaos(tmp_path, kills=4, seed=5)
    print(report.text())
    assert report.kills >= 4
    assert (report.duplicates, report.lost, report.unexpected) == (0, 0, 0)
    assert report.records_out == report.records_in > 0
