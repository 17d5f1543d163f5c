"""Issue 27: small partitions share one file per parse task, and the write stage makes each one's file
from its range of rows (locally, and from S3 by ranged reads)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from glue_processor.read.parts import Staged
from glue_processor.read.task import TaskResult, run_task
from glue_processor.shared.declared import parse_schema
from glue_processor.shared.objects import local_path, store_for
from glue_processor.shared.partitioning import parse_partition_by
from glue_processor.shared.spec import FileTask, TaskSpec
from glue_processor.shared.spill import sort_spill
from glue_processor.table.footer import footer_of
from glue_processor.write.merge import merge_parts, plan_merge
from glue_processor.write.shared import SharedReader, contiguous_groups
from glue_processor.write.stage import merge_all
from glue_processor.write.uploads import BackgroundUploads

NOW = datetime.now(UTC)


def labels(values: list[str]) -> pa.DictionaryArray:
    return pa.array(values).dictionary_encode()


def test_a_spill_sorts_small_partitions_first_then_own_ones_each_contiguous() -> None:
    # Given two runs of rows over four partitions, "big" holding most of the weight
    first = pa.table({"v": list(range(6))})
    second = pa.table({"v": list(range(6, 12))})
    spill = sort_spill(
        [first, second],
        [labels(["b", "big", "a", "big", "c", "big"]), labels(["big", "a", "big", "big", "b", "big"])],
        weight=12_000,
        own_bytes=3_000,  # 1,000 a row: "big" (7 rows) is its own, a/b/c (2, 2, 1) share
    )
    # Then the shared partitions come first in label order, then the own one, each a run of rows
    assert [s[0] for s in spill.shared] == ["a", "b", "c"] and [o[0] for o in spill.own] == ["big"]
    assert spill.shared_rows == 5
    rows = spill.table.column("v").to_pylist()
    got = {label: rows[start : start + n] for label, start, n in spill.shared + spill.own}
    assert got == {"a": [2, 7], "b": [0, 10], "c": [4], "big": [1, 3, 5, 6, 8, 9, 11]}  # stable: in arrival order
    # And a spill of one partition is never shared, however small
    alone = sort_spill([first], [labels(["x"] * 6)], weight=6, own_bytes=10**9)
    assert alone.shared == [] and alone.own == [("x", 0, 6)]


def test_contiguous_groups_keep_order_and_balance_bytes() -> None:
    sizes = [1.0] * 10 + [10.0] + [1.0] * 10
    groups = contiguous_groups(sizes, 3)
    assert [i for g in groups for i in g] == list(range(21))  # every item once, in order
    assert len(groups) <= 3 and all(groups)
    assert contiguous_groups([5.0], 4) == [[0]] and contiguous_groups([], 4) == []


def _lines(n: int, kinds: int, first: int = 0) -> bytes:
    return "".join(
        json.dumps({"a": str(i), "kind": f"k{i % kinds:04d}"}) + "\n" for i in range(first, first + n)
    ).encode()


def _task(src: str, out: str, index: int, *, etag: str = "e", stores: Any = store_for, **spec: Any) -> TaskResult:
    return run_task(
        TaskSpec(
            index=index,
            files=(FileTask(src, src, etag, datetime.now(UTC), "s3://m/1.json"),),
            known=("a", "kind"),
            data_dir=f"{out}/parts",
            quarantine_dir=f"{out}/quarantine",
            batch_id=1,
            ingest_time=NOW,
            target_bytes=128 * 1024 * 1024,
            partitions=parse_partition_by("kind", parse_schema('{"columns": {"kind": "string"}}')),
            **spec,
        ),
        stores,
    )


def _parse(src: str, out: str, index: int, *, etag: str = "e", stores: Any = store_for) -> list[Staged]:
    return list(_task(src, out, index, etag=etag, stores=stores).data)


def test_a_task_over_a_thousand_partitions_writes_one_shared_file(tmp_path: Path) -> None:
    # Given two tasks whose rows span 1,000 partitions
    out = f"file://{tmp_path}/out"
    staged = []
    for index in range(2):
        src = tmp_path / f"f{index}.json"
        src.write_bytes(_lines(5000, 1000, first=index * 5000))
        staged += _parse(f"file://{src}", out, index)
    # Then each task wrote one file, and reported a range of it per partition
    assert len({s.uri for s in staged}) == 2
    assert all(s.shared is not None for s in staged) and len(staged) == 2000
    # When the write stage makes the partitions' files, a task's share of them in label order
    plan = plan_merge(staged, ("a", "kind"), target_bytes=128 * 1024 * 1024, out_dir=f"{out}/final")
    groups = contiguous_groups([sum(p.bytes for p in m.parts) for m in plan.merges], 2)
    written = [f for g in groups for f in merge_all([plan.merges[i] for i in g])]
    # Then every partition is one file holding its rows, every row once
    assert len(written) == 1000 and len({f.partition for f in written}) == 1000
    # each reported with its file's own size and footer (written from memory: the driver reads neither)
    assert all(f.bytes == local_path(f.uri).stat().st_size for f in written)
    assert all(f.footer == footer_of(local_path(f.uri)) for f in written)
    rows = [r for f in written for r in pq.read_table(local_path(f.uri), partitioning=None).to_pylist()]
    assert sorted(int(r["a"]) for r in rows) == list(range(10000))
    assert all(
        f"kind={r['kind']}" == f.partition
        for f in written
        for r in pq.read_table(local_path(f.uri), partitioning=None).to_pylist()
    )


@pytest.mark.usefixtures("aws")
def test_shared_ranges_are_read_from_s3_by_ranged_gets(tmp_path: Path) -> None:
    # Given parse tasks staging into S3, their rows over 300 partitions
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="stage")
    stores = lambda uri: store_for(uri, s3_client=s3)  # noqa: E731
    staged = []
    for index in range(2):
        put = s3.put_object(Bucket="stage", Key=f"in/f{index}.json", Body=_lines(3000, 300, first=index * 3000))
        uri = f"s3://stage/in/f{index}.json"
        staged += _parse(uri, "s3://stage/out", index, etag=put["ETag"].strip('"'), stores=stores)
    assert len({s.uri for s in staged}) == 2
    # When one merge task makes every partition's file from them, counting its reads
    gets: Counter[str] = Counter()

    def count(params: dict[str, Any], **_: Any) -> None:
        gets["range" if "Range" in params else "whole"] += 1

    s3.meta.events.register("provide-client-params.s3.GetObject", count)
    plan = plan_merge(staged, ("a", "kind"), target_bytes=128 * 1024 * 1024, out_dir="s3://stage/final")
    reader = SharedReader(stores)
    with BackgroundUploads(stores) as uploads:  # as merge_all writes: each file PUT while the next is made
        written = [merge_parts(m, uploads.store, shared=reader) for m in plan.merges]
    reader.close()
    reads = dict(gets)
    assert len(written) == 300 and len({f.uri for f in written}) == 300
    # Then every row is in its partition's file once
    rows = []
    for f in written:
        body = s3.get_object(Bucket="stage", Key=f.uri.removeprefix("s3://stage/"))["Body"].read()
        table = pq.read_table(pa.BufferReader(body))
        assert (len(body), body[-8 - len(f.footer) : -8]) == (f.bytes, f.footer)
        assert set(table.column("kind").to_pylist()) == {f.partition.removeprefix("kind=")}
        rows += table.column("a").to_pylist()
    assert sorted(int(a) for a in rows) == list(range(6000))
    # And the shared files were read in ranges, each file's footer and row groups once, never whole
    assert reads.get("whole", 0) == 0 and 0 < reads["range"] <= 2 * 8, reads


def test_a_task_keeps_apart_the_rows_of_at_most_its_partition_limit(tmp_path: Path) -> None:
    # Given a task over 20,000 rows of 5,000 partitions (k0000 the most rows), and a limit of 10
    lines = [{"a": str(i), "kind": "k0000" if i % 3 == 0 else f"k{i % 5000:04d}"} for i in range(20_000)]
    src = tmp_path / "f.json"
    src.write_bytes("".join(json.dumps(r) + "\n" for r in lines).encode())
    result = _task(f"file://{src}", f"file://{tmp_path}/out", 0, partition_limit=10)
    # Then it reports ranges of ten partitions, the null one among them, whatever the input had
    assert len({s.partition for s in result.data}) == 10 and "kind=null" in {s.partition for s in result.data}
    assert "kind=k0000" in {s.partition for s in result.data}  # the largest of its chunk first
    # And every row is staged once: a moved row's kind is in _extra, its column NULL
    reader = SharedReader(store_for)
    rows = [
        (s.partition, r)
        for s in result.data
        for r in (
            reader.rows(s.uri, s.shared.first, s.shared.rows, s.shared.file_bytes)
            if s.shared is not None
            else pq.read_table(local_path(s.uri), partitioning=None)
        ).to_pylist()
    ]
    assert sorted(int(r["a"]) for _, r in rows) == list(range(20_000))
    moved = [r for label, r in rows if label == "kind=null"]
    assert result.overflow_records == len(moved) > 0
    assert all(r["kind"] is None and dict(r["_extra"])["kind"] == lines[int(r["a"])]["kind"] for r in moved)
    assert all(label == f"kind={r['kind']}" for label, r in rows if label != "kind=null")
