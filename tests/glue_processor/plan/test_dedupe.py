"""The dedupe index: exact answers, memory bounded by the window, and a snapshot for restarts."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import numpy as np

from glue_processor.plan.dedupe import SEGMENT_SPAN_S, DedupeIndex

T0 = datetime(2026, 11, 22, tzinfo=UTC)


def ids(batch: int, n: int = 50) -> list[tuple[str, str, str]]:
    return [("landing", f"in/{batch}/{i}.json", f"etag-{batch}-{i}") for i in range(n)]


def test_lookup_names_the_batch_that_ingested_each_version() -> None:
    index = DedupeIndex()
    for b in range(10):
        index.add_batch(b, T0 + timedelta(seconds=30 * b), ids(b))
    got = index.lookup([ids(3)[7], ids(9)[0], ("landing", "in/new.json", "e")])
    assert got == [3, 9, None]
    assert ids(4)[1] in index and index[ids(4)[1]] == 4
    assert ("landing", "in/3/7.json", "another-etag") not in index  # a new version is new


def test_memory_follows_the_window_not_the_history() -> None:
    # Given a day-long window and a job that has run for 5 days, 30 s batches
    index = DedupeIndex()
    window = timedelta(hours=24)
    sizes = []
    for b in range(5 * 2880):
        at = T0 + timedelta(seconds=30 * b)
        index.add_batch(b, at, ids(b, 10))
        index.expire(at - window)
        if b % 2880 == 2879:
            sizes.append(len(index))
    # Then after the first day the index holds one window (plus at most one segment), every day
    assert sizes[0] == 2880 * 10
    per_segment = int(SEGMENT_SPAN_S // 30) * 10
    assert all(s <= 2880 * 10 + per_segment for s in sizes[1:])
    assert index.lookup([ids(5 * 2880 - 1, 10)[0], ids(0, 10)[0]]) == [5 * 2880 - 1, None]


def test_a_snapshot_restores_the_index_and_the_keys() -> None:
    index = DedupeIndex()
    for b in range(130):
        index.add_batch(b, T0 + timedelta(seconds=30 * b), ids(b, 5))
    data = index.to_bytes(keys={"events": {"a", "b"}, "orders": {"c"}}, at=T0 + timedelta(hours=1))
    restored, keys, at = DedupeIndex.from_bytes(data)
    assert keys == {"events": {"a", "b"}, "orders": {"c"}} and at == T0 + timedelta(hours=1)
    # a snapshot from before routing (a list of one table's keys) reads as the keys of table ""
    old = io.BytesIO()
    np.savez(old, at=np.array([T0.timestamp()]), keys=np.array([json.dumps(["a"])]), slots=np.array([], np.int64))
    assert DedupeIndex.from_bytes(old.getvalue())[1] == {"": {"a"}}
    assert len(restored) == len(index) == 650
    probe = [ids(b, 5)[b % 5] for b in range(0, 130, 13)]
    assert restored.lookup(probe) == index.lookup(probe) == list(range(0, 130, 13))
