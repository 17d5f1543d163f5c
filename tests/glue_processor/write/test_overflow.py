"""The partition limit of a table's share (glue_processor.write.overflow): which partitions keep their
rows, and which move to the null partition."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glue_processor.read.parts import SharedRows, Staged
from glue_processor.write.overflow import overflow

NULL = "kind=null"


def part(label: str, size: int, n: int = 0, *, shared: bool = True) -> Staged:
    rows = SharedRows(first=n, rows=1, file_bytes=10_000) if shared else None
    return Staged(f"file:///parts/{label}-{n}.parquet", size, ("kind",), partition=label, shared=rows)


def moved_partitions(parts: list[Staged], out: list[Staged]) -> int:
    """The partitions of ``parts`` no part of ``out`` is in any more."""
    return len({p.partition for p in parts} - {p.partition for p in out})


def kept(parts: list[Staged]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in parts:
        out[p.partition] = out.get(p.partition, 0) + p.bytes
    return out


def test_a_share_within_its_limit_is_left_as_it_is() -> None:
    parts = [part("kind=a", 5), part("kind=b", 3), part(NULL, 1)]
    assert overflow(parts, 3, NULL) == parts
    assert overflow(parts, 10, NULL) == parts


def test_past_the_limit_the_largest_partitions_keep_their_rows_and_the_rest_join_the_null_partition() -> None:
    # Given parts of five partitions (two parts for a, one of them a file of its own) and no null one
    parts = [
        part("kind=a", 40, 0, shared=False),
        part("kind=b", 50, 1),
        part("kind=a", 20, 2),
        part("kind=c", 10, 3),
        part("kind=d", 30, 4),
        part("kind=e", 10, 5),
    ]
    # When the limit is three
    out = overflow(parts, 3, NULL)
    moved = moved_partitions(parts, out)
    # Then the two largest by bytes (a: 60, b: 50) keep theirs, the null partition being the third
    assert kept(out) == {"kind=a": 60, "kind=b": 50, NULL: 50}
    assert moved == 3
    # And each moved part is relabelled and marked, and nothing else of it changes
    assert {p.uri: (p.partition, p.overflow, p.bytes, p.shared) for p in out} == {
        p.uri: (
            NULL if p.partition in ("kind=c", "kind=d", "kind=e") else p.partition,
            p.partition in "kind=c kind=d kind=e",
            p.bytes,
            p.shared,
        )
        for p in parts
    }


def test_moved_ranges_that_follow_one_another_in_a_shared_file_are_read_as_one() -> None:
    # Given a task's shared file with partitions a to f in label order (rows 0-59), f kept, and a
    # moved part of a file of its own
    shared = [
        Staged("file:///s0.parquet", 10 * (6 - i), ("kind",), partition=f"kind={c}", shared=SharedRows(10 * i, 10, 999))
        for i, c in enumerate("abcdef")
    ]
    own = Staged("file:///own.parquet", 1, ("kind",), partition="kind=e")
    # When the limit keeps a and b (the largest) and the null partition
    parts = [*reversed(shared), own]
    out = overflow(parts, 3, NULL)
    moved = moved_partitions(parts, out)
    # Then c to f's ranges (rows 20-59) are one range of the null partition, marked, with their bytes
    assert moved == 4
    assert [(p.uri, p.partition, p.overflow, p.shared, p.bytes) for p in out] == [
        ("file:///s0.parquet", "kind=b", False, SharedRows(10, 10, 999), 50),
        ("file:///s0.parquet", "kind=a", False, SharedRows(0, 10, 999), 60),
        ("file:///own.parquet", NULL, True, None, 1),
        ("file:///s0.parquet", NULL, True, SharedRows(20, 40, 999), 40 + 30 + 20 + 10),
    ]


def test_the_null_partition_counts_toward_the_limit_and_its_own_rows_are_not_moved() -> None:
    parts = [part(NULL, 1), part("kind=a", 9), part("kind=b", 8), part("kind=c", 7)]
    out = overflow(parts, 2, NULL)
    moved = moved_partitions(parts, out)
    assert kept(out) == {"kind=a": 9, NULL: 16}
    assert moved == 2
    assert [p.overflow for p in out] == [False, False, True, True]  # the null partition's own part stays as it was


def test_a_limit_of_one_moves_every_partition_but_the_null_one() -> None:
    parts = [part("kind=a", 9), part("kind=b", 8)]
    out = overflow(parts, 1, NULL)
    moved = moved_partitions(parts, out)
    assert {p.partition for p in out} == {NULL} and moved == 2
    with pytest.raises(ValueError, match="at least 1"):
        overflow([], 0, NULL)


def test_ties_are_broken_by_label() -> None:
    parts = [part(f"kind={c}", 5, i) for i, c in enumerate("edcba")]
    out = overflow(parts, 3, NULL)
    assert set(kept(out)) == {"kind=a", "kind=b", NULL}


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.sampled_from([*"abcdefghij", "null"]), st.integers(0, 50)), max_size=40),
    limit=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_the_choice_depends_on_the_partitions_not_on_the_order_parts_come_in(
    sizes: list[tuple[str, int]], limit: int, seed: int
) -> None:
    parts = [part(f"kind={label}", size, n) for n, (label, size) in enumerate(sizes)]
    shuffled = parts[:]
    random.Random(seed).shuffle(shuffled)
    out = overflow(parts, limit, NULL)
    moved = moved_partitions(parts, out)
    again = overflow(shuffled, limit, NULL)
    moved_again = moved_partitions(shuffled, again)
    # a replay of the batch (its tasks' parts in another order) decides alike
    assert {p.uri: (p.partition, p.overflow) for p in out} == {p.uri: (p.partition, p.overflow) for p in again}
    assert moved == moved_again
    before, after = kept(parts), kept(out)
    # at most the limit, every byte still somewhere, and a kept partition never lighter than a moved one
    assert len(after) <= max(limit, 1) and sum(after.values()) == sum(before.values())
    assert moved == len(before) - len(after.keys() & before.keys())
    gone = [before[label] for label in before if label not in after]
    stayed = [before[label] for label in before if label in after and label != NULL]
    assert not gone or not stayed or min(stayed) >= max(gone)
    # a part is marked only when it moved, and every moved part is there (each of its own uri here)
    before_label = {p.uri: p.partition for p in parts}
    assert {p.uri for p in out} == set(before_label)
    assert all(p.overflow == (p.partition == NULL and before_label[p.uri] != NULL) for p in out)


def test_a_run_of_moved_ranges_stops_at_its_byte_cap() -> None:
    # the null partition's files are packed to the target from its parts: a run as large as the
    # whole shared file would be one merge, all of it in memory at once
    shared = [
        Staged("file:///s0.parquet", 10, ("kind",), partition=f"kind={i:02d}", shared=SharedRows(10 * i, 10, 999))
        for i in range(10)
    ]
    out = overflow(shared, 1, NULL, run_bytes=35)
    moved = moved_partitions(shared, out)
    assert moved == 10
    assert [(p.shared.first, p.shared.rows, p.bytes) for p in out if p.shared] == [
        (0, 30, 30),
        (30, 30, 30),
        (60, 30, 30),
        (90, 10, 10),
    ]
    # a range larger than the cap alone is left whole
    big = [Staged("file:///s1.parquet", 50, ("kind",), partition="kind=x", shared=SharedRows(0, 5, 999))]
    assert sorted(p.bytes for p in overflow(big + shared[:1], 1, NULL, run_bytes=35)) == [10, 50]
