"""A large plain object read in byte ranges by several tasks: every line read once, with the
object's own line numbers, and one outcome per object."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glue_processor.plan import sizing
from glue_processor.plan.ranges import RangeLines, count_lines, number_ranges, object_outcomes
from glue_processor.read.task import run_task
from glue_processor.shared.objects import ObjectStream, local_path, store_for
from glue_processor.shared.spec import FileOutcome, FileTask, TaskSpec
from glue_processor.shared.text import Chunk, Limits, OwnedLines, chunks, line_starts, read_from
from tests.glue_processor.test_batch import Env
from tests.helpers import read_rows

NOW = datetime(2026, 11, 23, tzinfo=UTC)
_LINES = st.lists(
    st.sampled_from([b"", b"a", b"bb", b"{}\r", b" ", b"x" * 40, b'{"k":"\\n"}']),
    max_size=30,
)


def numbered_lines(pieces: list[Chunk]) -> list[tuple[int, bytes]]:
    out = []
    for piece in pieces:
        text = bytes(piece.text)
        body = text[:-1] if text.endswith(b"\n") else text
        out.extend((piece.first_line + i, line) for i, line in enumerate(body.split(b"\n")))
    return out


@settings(max_examples=300, deadline=None)
@given(
    lines=_LINES,
    trailing=st.booleans(),
    cuts=st.lists(st.floats(0, 1), max_size=5),
    read=st.sampled_from([1, 3, 64, 4096]),
)
def test_ranges_own_every_line_once_with_its_own_number(
    lines: list[bytes], trailing: bool, cuts: list[float], read: int
) -> None:
    # Given any text and any cut points
    text = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    if not text:
        return
    bounds = sorted({0, len(text), *(int(c * len(text)) for c in cuts)})
    # When each range is counted and read from where its reader starts, numbered from the counts
    got, parts, first = [], [], 1
    for start, end in itertools.pairwise(bounds):
        last = end == len(text)  # the last range reads to the end of the object
        owned = OwnedLines(io.BytesIO(text[read_from(start) :]), start=start, end=None if last else end)
        body = b"".join(iter(lambda owned=owned: owned.read(read), b""))
        parts.append(body)
        got += numbered_lines(list(chunks(io.BytesIO(body), Limits(chunk_bytes=7), first_line=first)))  # type: ignore[arg-type]
        first += line_starts(io.BytesIO(text[read_from(start) :]), start=start, end=end)
    # Then the ranges are the text, and every line has the number it has in the whole text
    assert b"".join(parts) == text
    whole = numbered_lines(list(chunks(io.BytesIO(text), Limits(chunk_bytes=7))))  # type: ignore[arg-type]
    assert got == whole
    assert first - 1 == len(whole)


def test_a_gb_object_alone_on_16_g1x_workers_keeps_every_core_busy() -> None:
    # Given a batch of one plain 1 GB object, on 15 executors of 4 cores
    mb = 1024 * 1024
    cores = 15 * 4
    # When it is planned
    pieces = sizing.plan_pieces([1024.0 * mb], [True], cores=cores)
    weights = [p.estimate for p in pieces]
    units = sizing.plan_groups(weights, sizing.parse_unit_count(weights, cores=cores))
    # Then it is read in ranges that cover it exactly, at least a task a core
    assert pieces[0].start == 0 and pieces[-1].end is None  # the last range reads to the end
    assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
    assert len(units) >= cores
    # and a gzip object (one stream) is read whole, as are small objects
    assert [(p.start, p.end) for p in sizing.plan_pieces([1024.0 * mb], [False], cores=cores)] == [(0, None)]
    assert all(p.end is None for p in sizing.plan_pieces([3.5 * mb] * 1667, [True] * 1667, cores=80))


def test_ranges_are_numbered_from_their_counts_and_an_object_that_cannot_be_counted_is_not_read() -> None:
    # Given two split objects and a whole one; the second's middle range is gone when counted
    def task(item: int, start: int, end: int | None) -> FileTask:
        return FileTask(f"file:///o{item}", f"s3://b/o{item}", "e", NOW, "m", item=item, start=start, end=end)

    items = [task(0, 0, 10), task(0, 10, 20), task(0, 20, None), task(1, 0, 10), task(1, 10, 20), task(1, 20, None)]
    items.append(task(2, 0, None))
    counts = {(0, 0): 4, (0, 10): 0, (1, 0): 2}

    def run(fn: Any, ranges: list[FileTask]) -> list[RangeLines]:
        # the last range of each object is not counted: no range comes after it
        assert fn is count_lines and [(r.item, r.start) for r in ranges] == [(0, 0), (0, 10), (1, 0), (1, 10)]
        return [
            RangeLines(r.item, r.start, counts[r.item, r.start])
            if (r.item, r.start) in counts
            else RangeLines(r.item, r.start, status="missing", reason="object not found")
            for r in ranges
        ]

    numbered, problems = number_ranges(items, run)
    assert [(i.item, i.start, i.first_line) for i in numbered] == [(0, 0, 1), (0, 10, 5), (0, 20, 5), (2, 0, 1)]
    assert [(p.item, p.status, p.reason) for p in problems] == [(1, "missing", "object not found")]


def test_an_objects_outcome_sums_its_ranges_and_names_the_ranges_that_failed() -> None:
    ranges = [
        FileOutcome("u", "ingested", good=3, bad=1, text_bytes=10, new_keys=("a", "b"), item=4, start=0, end=10),
        FileOutcome("u", "missing", reason="object not found", item=4, start=10, end=20),
        FileOutcome("u", "ingested", good=2, text_bytes=10, new_keys=("c", "a"), item=4, start=20, end=30),
        FileOutcome("v", "missing", reason="gone", item=5, start=0, end=5),
        FileOutcome("v", "empty", bad=2, item=5, start=5, end=9),
        FileOutcome("w", "ingested", good=1, item=6),
    ]
    merged, lost = object_outcomes(ranges)
    by_item = {m.item: m for m in merged}
    assert (by_item[4].status, by_item[4].good, by_item[4].bad, by_item[4].new_keys) == (
        "ingested",
        5,
        1,
        ("a", "b", "c"),
    )
    assert [(f.item, f.start, f.end) for f in lost] == [(4, 10, 20)]
    # nothing of v loaded: it is a whole-object problem, as if it had been read whole
    assert (by_item[5].status, by_item[5].reason, by_item[5].end) == ("missing", "gone", None)
    assert by_item[6] == ranges[-1]


@pytest.mark.spark
def test_a_large_object_is_read_in_ranges_with_its_own_line_numbers(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given one plain object of ~370 KB with bad lines and blank lines here and there, and parse
    # units of at most 40 KB
    monkeypatch.setattr(sizing, "MAX_UNIT_BYTES", 40 * 1024)
    monkeypatch.setattr(sizing, "MIN_RANGE_BYTES", 16 * 1024)
    env = Env(tmp_path)
    lines, good = [], {}
    for n in range(1, 6001):
        if n % 997 == 0:
            lines.append(b"not json")
        elif n % 1499 == 0:
            lines.append(b"")
        else:
            lines.append(json.dumps({"n": n, "pad": "y" * (n % 80)}).encode())
            good[n] = str(n)
    entry = env.put("in/big.json", b"\n".join(lines) + b"\n")
    pieces = sizing.plan_pieces([entry.size], [True], cores=spark.sparkContext.defaultParallelism)
    assert len(pieces) >= 8
    # When one batch loads it
    record = env.job(spark).run([env.manifest("m0", [entry])], 0)
    # Then every good line is one row whose _line is its number in the object, and every bad line
    # is quarantined under its number
    rows = read_rows(tmp_path / "output")
    assert sorted((r["_line"], r["n"]) for r in rows) == sorted(good.items())
    assert sorted(q["line"] for q in env.quarantine()) == [997 * k for k in range(1, 7)]
    (source,) = record.sources
    assert (source.status, source.records, source.bad_records) == ("ingested", len(good), 6)


@pytest.mark.usefixtures("aws")
def test_ranges_of_an_s3_object_are_counted_and_read_from_its_version() -> None:
    # Given a versioned object overwritten after its event, so only its version id names its bytes
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="landing")
    s3.put_bucket_versioning(Bucket="landing", VersioningConfiguration={"Status": "Enabled"})
    body = b"".join(b'{"i":%d}\n' % i for i in range(1, 301)) + b"oops\n"
    first = s3.put_object(Bucket="landing", Key="big.json", Body=body)
    s3.put_object(Bucket="landing", Key="big.json", Body=b'{"i":"other version"}\n')
    uri = "s3://landing/big.json"
    stores = lambda u: store_for(u, s3_client=s3)  # noqa: E731
    cuts = [0, 7, 1000, 1001, None]  # mid-line, on a line start, to the end
    items = [
        FileTask(uri, uri, first["ETag"].strip('"'), NOW, "m", first["VersionId"], item=0, start=a, end=b)
        for a, b in itertools.pairwise(cuts)
        if a is not None
    ]
    # When its ranges are counted (Range GETs of that version), numbered and read by two tasks
    numbered, problems = number_ranges(items, lambda fn, xs: [fn(x, stores) for x in xs])
    results = [
        run_task(task_spec(numbered[:2]), stores),
        run_task(task_spec(numbered[2:]), stores),
    ]
    # Then every line of that version is read once, under its own number
    assert problems == []
    merged, lost = object_outcomes([f for r in results for f in r.files])
    assert lost == [] and [(m.status, m.good, m.bad) for m in merged] == [("ingested", 300, 1)]
    rows = [row for r in results for s in r.data for row in pq.read_table(local_path(s.uri)).to_pylist()]
    assert sorted((row["_line"], row["i"]) for row in rows) == [(i, str(i)) for i in range(1, 301)]


def task_spec(files: list[FileTask]) -> TaskSpec:
    out = Path(tempfile.mkdtemp()).as_uri()
    return TaskSpec(
        index=0,
        files=tuple(files),
        known=("i",),
        data_dir=f"{out}/data",
        quarantine_dir=f"{out}/q",
        batch_id=1,
        ingest_time=NOW,
        target_bytes=1 << 27,
    )


def test_a_range_whose_read_breaks_while_counted_makes_its_object_unreadable_not_the_batch() -> None:
    # Given a range whose stream breaks (a reset connection) while its lines are counted
    class Broken(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            raise ConnectionResetError("connection reset by peer")

    class Store:
        @contextlib.contextmanager
        def open(self, uri: str, **_: Any) -> Iterator[ObjectStream]:
            yield ObjectStream(io.BufferedReader(Broken()), 0.0, exact=True)

    item = FileTask("s3://landing/x", "s3://landing/x", "e", NOW, "m", item=3, start=0, end=100)
    # When it is counted, Then the range says so (the batch goes on; the object is quarantined whole)
    got = count_lines(item, lambda _: Store())  # type: ignore[arg-type,return-value]
    assert (got.item, got.status) == (3, "unreadable") and "connection reset" in (got.reason or "")
    numbered, problems = number_ranges([item, replace(item, start=100, end=None)], lambda fn, xs: [got])
    assert numbered == [] and [(p.item, p.status) for p in problems] == [(3, "unreadable")]
