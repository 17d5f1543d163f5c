"""The write side without Spark: parse tasks' parts become files of about the target size."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq

from glue_processor.read.task import run_task
from glue_processor.shared.objects import local_path
from glue_processor.shared.spec import FileTask, TaskSpec
from glue_processor.write.merge import merge_parts, plan_merge

NOW = datetime.now(UTC)


def parse(tmp_path: Path, index: int, lines: list[dict[str, object]], *, target: int) -> list:
    src = tmp_path / "src" / f"f{index}.json"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = f"file://{tmp_path}/out"
    spec = TaskSpec(
        index=index,
        # the event comes after the write, as S3 sends it
        files=(FileTask(f"file://{src}", f"s3://b/f{index}.json", "e", datetime.now(UTC), "s3://m/1.json"),),
        known=("a",),
        data_dir=f"{out}/parts",
        quarantine_dir=f"{out}/quarantine",
        batch_id=1,
        ingest_time=NOW,
        target_bytes=target,
    )
    return list(run_task(spec).data)


def rows_of(paths: list[Path]) -> list[dict[str, object]]:
    return [r for p in paths for r in pq.read_table(p).to_pylist()]


def test_small_parts_merge_into_target_sized_files_with_the_final_columns(tmp_path: Path) -> None:
    # Given three parse tasks: two small ones with key "a", and one that found a new key "Name"
    target = 256 * 1024
    parts = parse(tmp_path, 0, [{"a": f"{i:06d}" * 20} for i in range(2000)], target=target)
    parts += parse(tmp_path, 1, [{"a": f"{i:06d}" * 20} for i in range(2000, 2600)], target=target)
    parts += parse(tmp_path, 2, [{"a": "x", "Name": i} for i in range(300)], target=target)
    keys = ("Name", "a")
    # When the write side is planned and run
    plan = plan_merge(parts, keys, target_bytes=target, out_dir=f"file://{tmp_path}/out/files")
    written = [merge_parts(m) for m in plan.merges]
    outputs = [local_path(p.uri) for p in (*plan.keep, *written)]
    # Then every row is there once, every file has the batch's columns, in the same order
    rows = rows_of(outputs)
    assert len(rows) == 2900
    assert sorted((r["_source_uri"], r["_line"]) for r in rows) == sorted(
        [("s3://b/f0.json", n) for n in range(1, 2001)]
        + [("s3://b/f1.json", n) for n in range(1, 601)]
        + [("s3://b/f2.json", n) for n in range(1, 301)]
    )
    schemas = {tuple(pq.read_schema(p).names) for p in outputs}
    assert len(schemas) == 1 and next(iter(schemas))[:2] == ("a", "Name")
    assert {r["Name"] for r in rows if r["_source_uri"] == "s3://b/f2.json"} == {str(i) for i in range(300)}
    # And the files are about the target size, the merged parts deleted
    sizes = sorted(p.stat().st_size for p in outputs)
    assert sum(1 for s in sizes if abs(s - target) <= 0.15 * target) >= len(sizes) - 1
    merged_parts = {p.uri for m in plan.merges for p in m.parts}
    assert merged_parts and not any(local_path(u).exists() for u in merged_parts)


def test_a_full_part_with_the_final_columns_is_kept_as_it_is(tmp_path: Path) -> None:
    target = 64 * 1024
    parts = parse(tmp_path, 0, [{"a": f"{i:08d}" * 40} for i in range(3000)], target=target)
    plan = plan_merge(parts, ("a",), target_bytes=target, out_dir=f"file://{tmp_path}/out/files")
    assert plan.keep and all(p.bytes >= 0.85 * target for p in plan.keep)
    assert all(local_path(p.uri).exists() for p in plan.keep)
    assert sum(len(m.parts) for m in plan.merges) + len(plan.keep) == len(parts)


def test_parts_of_a_quarter_target_pack_into_files_on_target() -> None:
    from glue_processor.read.parts import Staged

    # Given 20 parts of 36 MB (714 MB, 5.6 targets): six files would be 108-144 MB, two outside ±15%
    mb = 1024 * 1024
    parts = [Staged(f"file:///p/{i}.parquet", 36 * mb, ("a",)) for i in range(20)]
    plan = plan_merge(parts, ("a",), target_bytes=128 * mb, out_dir="file:///out", keep_parts=False)
    # Then the plan takes the file count whose files are all on target, with every part once
    sizes = [sum(p.bytes for p in m.parts) for m in plan.merges]
    assert sorted(u for m in plan.merges for u in (p.uri for p in m.parts)) == sorted(p.uri for p in parts)
    assert all(abs(s - 128 * mb) <= 0.15 * 128 * mb for s in sizes), [s // mb for s in sizes]


def test_the_null_partition_past_the_limit_is_packed_in_the_order_of_its_shared_files() -> None:
    import random

    from glue_processor.read.parts import SharedRows, Staged

    # Given moved ranges of three shared files, interleaved as the tasks reported them (20 each, 10 bytes)
    parts = [
        Staged(f"file:///s{f}.parquet", 10, ("a",), partition="k=null", shared=SharedRows(r * 5, 5, 999), overflow=True)
        for f in range(3)
        for r in range(20)
    ]
    random.Random(3).shuffle(parts)
    # When the null partition is planned for files of 100 bytes
    plan = plan_merge(parts, ("a",), target_bytes=100, out_dir="file:///out")
    # Then every range is in one file, each file a run of one shared file in row order (read once)
    got = [[(p.uri, p.shared.first) for p in m.parts if p.shared] for m in plan.merges]
    assert sorted(x for g in got for x in g) == sorted((p.uri, p.shared.first) for p in parts if p.shared)
    assert len(got) == 6 and all(len(g) == 10 for g in got)
    assert all(len({u for u, _ in g}) == 1 and [f for _, f in g] == sorted(f for _, f in g) for g in got)
