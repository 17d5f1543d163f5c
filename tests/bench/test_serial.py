"""``make bench``'s serial-cost row: small batches through the real query, each trigger's time outside
its parallel parse and write, itemised."""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.serial import STEPS, measure, summary


def test_each_trigger_is_committed_and_its_serial_part_itemised(tmp_path: Path) -> None:
    rows = measure(4, out=tmp_path / "serial")["batches"]
    assert [r["batch"] for r in rows] == [0, 1, 2, 3]  # a manifest a trigger, each committed
    for r in rows:
        assert 0 < r["parallel_s"] < r["batch_s"]
        assert abs(r["serial_s"] - (r["batch_s"] - r["parallel_s"])) < 1e-9
        # the items are parts of the serial time: the job's steps were timed in the trigger
        assert r["manifests"] > 0 and r["publish"] > 0 and r["Spark's steps"] > 0
        assert sum(r[k] for k in STEPS) <= r["serial_s"] + 0.005
    # the row's figures: medians of the last half (the JIT has compiled the trigger's code by then)
    assert summary(rows)["serial_s"] == statistics.median(r["serial_s"] for r in rows[2:])
