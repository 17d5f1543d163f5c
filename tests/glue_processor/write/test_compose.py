"""A merge of parts on S3 done by S3 (UploadPartCopy): the same file the local concatenation makes,
none of the parts' row-group bytes read by the merge, and S3's part-size rule kept (moto enforces
it: a part under 5 MiB but the last is refused with EntityTooSmall at completion, as S3 does; Amazon
S3 User Guide, "Amazon S3 multipart upload limits")."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError

from glue_processor.read.parts import Staged
from glue_processor.shared import parquet as parquet_writer
from glue_processor.shared.objects import MIN_PART_BYTES, LocalStore, ObjectStore, Range, S3Store
from glue_processor.table.footer import footer_of
from glue_processor.write import compose
from glue_processor.write.concat import ConcatError, concat
from glue_processor.write.merge import MergeSpec, merge_parts
from glue_processor.write.uploads import BackgroundUploads

KEYS = ("blob", "n")


@pytest.fixture
def s3(aws: None) -> Any:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="out")
    return client


class Calls:
    """The S3 operations a client made, the bytes its GetObject calls asked for, and the version
    each UploadPartCopy insisted on."""

    def __init__(self, client: Any) -> None:
        self.ops: list[str] = []
        self.ranges: list[str] = []
        self.if_match: list[str | None] = []
        client.meta.events.register("before-call.s3", self._called)

    def _called(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.ops.append(model.name)
        headers = params.get("headers", {})
        if model.name == "GetObject":
            self.ranges.append(headers.get("Range", "whole"))
        if model.name == "UploadPartCopy":
            self.if_match.append(headers.get("x-amz-copy-source-if-match"))


def part_file(tmp_path: Path, n: int, rows: int, value_bytes: int = 6 * 1024) -> Path:
    """A part as a parse task stages it (the job's writer), of incompressible values: ~rows x value_bytes."""
    rng = os.urandom
    table = pa.table(
        {"blob": pa.array([rng(value_bytes) for _ in range(rows)], pa.binary()), "n": pa.array(range(rows), pa.int64())}
    )
    path = tmp_path / f"part-{n}.parquet"
    parquet_writer.write(table, path)
    return path


def staged_on_s3(client: Any, paths: list[Path]) -> list[Staged]:
    parts = []
    for path in paths:
        client.upload_file(str(path), "out", f"parts/{path.name}")
        parts.append(Staged(f"s3://out/parts/{path.name}", path.stat().st_size, KEYS))
    return parts


def stores_of(client: Any) -> Any:
    def stores(uri: str) -> ObjectStore:
        return S3Store(client) if uri.startswith("s3://") else LocalStore()

    return stores


def read_back(client: Any, key: str) -> pa.Table:
    body = client.get_object(Bucket="out", Key=key)["Body"].read()
    return pq.read_table(io.BytesIO(body))


def test_parts_on_s3_are_merged_by_s3_into_the_file_concat_would_write(s3: Any, tmp_path: Path) -> None:
    paths = [part_file(tmp_path, n, rows) for n, rows in enumerate((1000, 1100, 950))]  # ~6 MiB each
    assert all(p.stat().st_size >= MIN_PART_BYTES for p in paths)
    parts = staged_on_s3(s3, paths)
    etags = [s3.head_object(Bucket="out", Key=f"parts/{p.name}")["ETag"] for p in paths]
    calls = Calls(s3)
    spec = MergeSpec(0, tuple(parts), KEYS, "s3://out/table/merged-00000.parquet")

    staged = merge_parts(spec, stores_of(s3))
    made, ranges = list(calls.ops), list(calls.ranges)

    # the same bytes the local concatenation writes from the same parts in the same order
    concat(paths, tmp_path / "local.parquet")
    body = s3.get_object(Bucket="out", Key="table/merged-00000.parquet")["Body"].read()
    assert body == (tmp_path / "local.parquet").read_bytes()
    assert staged.bytes == len(body) and staged.footer == footer_of(tmp_path / "local.parquet")
    assert read_back(s3, "table/merged-00000.parquet").num_rows == 3050
    # S3 copied the row groups: the merge read each part's end only, and deleted the parts
    assert made.count("UploadPartCopy") == 3 and made.count("UploadPart") == 1
    assert made.count("GetObject") == 3 and all(r.startswith("bytes=") for r in ranges)
    read = sum(int(r.split("-")[1]) - int(r.split("=")[1].split("-")[0]) + 1 for r in ranges)
    assert read <= 3 * compose.FOOTER_GUESS < sum(p.bytes for p in parts) // 20
    # each copy insists on the version whose footer planned the file
    assert sorted(calls.if_match) == sorted(etags)
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="out", Prefix="parts/").get("Contents", [])] == []


def test_a_part_under_s3s_smallest_part_goes_last_with_the_footer(s3: Any, tmp_path: Path) -> None:
    # a task's last part is small: put first here, S3 would refuse the upload (EntityTooSmall)
    paths = [part_file(tmp_path, 0, 120), part_file(tmp_path, 1, 1000), part_file(tmp_path, 2, 1000)]
    assert paths[0].stat().st_size < MIN_PART_BYTES
    parts = staged_on_s3(s3, paths)
    calls = Calls(s3)

    staged = merge_parts(MergeSpec(0, tuple(parts), KEYS, "s3://out/t/m.parquet"), stores_of(s3))
    made = list(calls.ops)

    table = read_back(s3, "t/m.parquet")
    assert table.num_rows == 2120
    assert staged.bytes == s3.head_object(Bucket="out", Key="t/m.parquet")["ContentLength"]
    assert sorted(table.column("n").to_pylist()) == sorted([*range(120), *range(1000), *range(1000)])
    assert table.column("n").to_pylist()[-120:] == list(range(120))  # its rows last
    concat([paths[1], paths[2], paths[0]], tmp_path / "local.parquet")  # the file, byte for byte
    assert s3.get_object(Bucket="out", Key="t/m.parquet")["Body"].read() == (tmp_path / "local.parquet").read_bytes()
    assert made.count("UploadPartCopy") == 2  # the small part was read, and sent with the footer


def test_two_small_parts_are_merged_by_copying_their_bytes(s3: Any, tmp_path: Path) -> None:
    paths = [part_file(tmp_path, n, 100) for n in range(3)]  # ~0.6 MiB each: S3 cannot compose them
    parts = staged_on_s3(s3, paths)
    calls = Calls(s3)

    merge_parts(MergeSpec(0, tuple(parts), KEYS, "s3://out/t/m.parquet"), stores_of(s3))
    made, ranges = list(calls.ops), list(calls.ranges)

    assert read_back(s3, "t/m.parquet").column("n").to_pylist() == [*range(100)] * 3
    assert "UploadPartCopy" not in made and "CreateMultipartUpload" not in made
    assert ranges.count("whole") == 3  # downloaded, as before


def test_a_failed_copy_aborts_the_upload_and_leaves_no_file(s3: Any, tmp_path: Path) -> None:
    paths = [part_file(tmp_path, n, 1000) for n in range(2)]
    parts = staged_on_s3(s3, paths)
    store = S3Store(s3)
    footers = [compose.remote_footer(store, p.uri, p.bytes) for p in parts]
    s3.delete_object(Bucket="out", Key="parts/part-1.parquet")  # gone between the footers' reads and the copy
    ranges = [Range(parts[0].uri, 0, footers[0][1]), Range(parts[1].uri, 4, footers[1][1] - 4)]
    assert all(r.length >= MIN_PART_BYTES for r in ranges)

    with pytest.raises(ClientError, match=r"NoSuchKey|Not Found|404"):
        store.compose("s3://out/t/m.parquet", ranges, b"tail")

    assert s3.list_multipart_uploads(Bucket="out").get("Uploads", []) == []
    assert "Contents" not in s3.list_objects_v2(Bucket="out", Prefix="t/")


def test_a_footer_longer_than_the_first_read_takes_a_second(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = part_file(tmp_path, 0, 50, value_bytes=100)
    (part,) = staged_on_s3(s3, [path])
    monkeypatch.setattr(compose, "FOOTER_GUESS", 64)  # shorter than the footer
    calls = Calls(s3)

    footer, start, etag = compose.remote_footer(S3Store(s3), part.uri, part.bytes)

    assert footer == footer_of(path) and start == path.stat().st_size - 8 - len(footer)
    assert calls.ops == ["GetObject", "GetObject"]
    assert f'"{etag}"' == s3.head_object(Bucket="out", Key=f"parts/{path.name}")["ETag"]


def test_an_object_that_is_not_parquet_is_named(s3: Any) -> None:
    s3.put_object(Bucket="out", Key="x", Body=b"{}\n" * 10)
    with pytest.raises(ConcatError, match="s3://out/x"):
        compose.remote_footer(S3Store(s3), "s3://out/x", 30)


def test_a_write_tasks_merges_are_composed_too(s3: Any, tmp_path: Path) -> None:
    # a batch of more than DRIVER_CONCATS files merges in Spark tasks, through the task's store
    # (write.uploads: its files uploaded in the background); S3 composes those files too
    paths = [part_file(tmp_path, n, 1000) for n in range(2)]
    parts = staged_on_s3(s3, paths)
    calls = Calls(s3)

    with BackgroundUploads(stores_of(s3)) as uploads:
        staged = merge_parts(MergeSpec(0, tuple(parts), KEYS, "s3://out/t/m.parquet"), uploads.store)
    made = list(calls.ops)

    assert made.count("UploadPartCopy") == 2 and "PutObject" not in made
    assert read_back(s3, "t/m.parquet").num_rows == 2000
    assert staged.bytes == s3.head_object(Bucket="out", Key="t/m.parquet")["ContentLength"]


def test_a_part_without_rows_adds_no_byte(s3: Any, tmp_path: Path) -> None:
    paths = [empty_part(tmp_path, "part-9.parquet"), part_file(tmp_path, 0, 1000), part_file(tmp_path, 1, 1000)]
    parts = staged_on_s3(s3, paths)
    calls = Calls(s3)

    staged = merge_parts(MergeSpec(0, tuple(parts), KEYS, "s3://out/t/m.parquet"), stores_of(s3))
    made = list(calls.ops)

    # the size the table records is the object's: a reader finds the footer by it
    assert staged.bytes == s3.head_object(Bucket="out", Key="t/m.parquet")["ContentLength"]
    assert read_back(s3, "t/m.parquet").num_rows == 2000
    assert made.count("UploadPartCopy") == 2  # composed, not copied through memory


def test_a_partitions_shared_rows_go_with_the_footer(s3: Any, tmp_path: Path) -> None:
    # a partition's file: its own parts on S3, and its rows from shared files re-encoded into a
    # local file (merge._with_shared); S3 copies the parts, the local rows are sent with the footer
    paths = [part_file(tmp_path, 0, 1000), part_file(tmp_path, 1, 120)]  # the second under 5 MiB
    parts = staged_on_s3(s3, paths)
    extra = part_file(tmp_path, 2, 30)
    calls = Calls(s3)

    staged = compose.composed(parts, "s3://out/t/m.parquet", KEYS, "", stores_of(s3), extra=extra)
    made = list(calls.ops)

    assert staged is not None and made.count("UploadPartCopy") == 1
    concat([*paths, extra], tmp_path / "local.parquet")
    body = s3.get_object(Bucket="out", Key="t/m.parquet")["Body"].read()
    assert body == (tmp_path / "local.parquet").read_bytes() and staged.bytes == len(body)


def test_shared_rows_of_another_schema_refuse_before_anything_is_written(s3: Any, tmp_path: Path) -> None:
    # merge._with_shared rewrites the file when the concatenation refuses: nothing may be left on S3
    parts = staged_on_s3(s3, [part_file(tmp_path, 0, 1000)])
    other = tmp_path / "other.parquet"
    parquet_writer.write(pa.table({"blob": pa.array([b"x"], pa.binary()), "n": pa.array(["1"])}), other)

    with pytest.raises(ConcatError, match="schema differs"):
        compose.composed(parts, "s3://out/t/m.parquet", KEYS, "", stores_of(s3), extra=other)

    assert s3.list_multipart_uploads(Bucket="out").get("Uploads", []) == []
    assert "Contents" not in s3.list_objects_v2(Bucket="out", Prefix="t/")


def empty_part(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    parquet_writer.write(pa.table({"blob": pa.array([], pa.binary()), "n": pa.array([], pa.int64())}), path)
    return path


def test_parts_without_rows_and_shared_rows_make_one_part_with_the_footer(s3: Any, tmp_path: Path) -> None:
    # nothing on S3 to copy but the first part's PAR1: it is read, and goes with the rows and footer
    paths = [empty_part(tmp_path, "part-a.parquet"), empty_part(tmp_path, "part-b.parquet")]
    parts = staged_on_s3(s3, paths)
    extra = part_file(tmp_path, 5, 30)
    calls = Calls(s3)

    staged = compose.composed(parts, "s3://out/t/m.parquet", KEYS, "", stores_of(s3), extra=extra)
    made = list(calls.ops)

    concat([*paths, extra], tmp_path / "local.parquet")
    body = s3.get_object(Bucket="out", Key="t/m.parquet")["Body"].read()
    assert staged is not None and body == (tmp_path / "local.parquet").read_bytes() and staged.bytes == len(body)
    assert "UploadPartCopy" not in made and made.count("UploadPart") == 1


def test_shared_rows_without_row_groups_add_no_byte(s3: Any, tmp_path: Path) -> None:
    paths = [part_file(tmp_path, 0, 1000)]
    parts = staged_on_s3(s3, paths)
    extra = empty_part(tmp_path, "shared.parquet")

    staged = compose.composed(parts, "s3://out/t/m.parquet", KEYS, "", stores_of(s3), extra=extra)

    concat([*paths, extra], tmp_path / "local.parquet")
    body = s3.get_object(Bucket="out", Key="t/m.parquet")["Body"].read()
    assert staged is not None and body == (tmp_path / "local.parquet").read_bytes() and staged.bytes == len(body)


def test_a_part_without_rows_and_one_small_part_compose(s3: Any, tmp_path: Path) -> None:
    # the small part gives the file its PAR1 and goes with the footer; the empty one adds nothing
    paths = [empty_part(tmp_path, "part-a.parquet"), part_file(tmp_path, 0, 120)]
    parts = staged_on_s3(s3, paths)
    calls = Calls(s3)

    staged = merge_parts(MergeSpec(0, tuple(parts), KEYS, "s3://out/t/m.parquet"), stores_of(s3))
    made = list(calls.ops)

    concat([paths[1], paths[0]], tmp_path / "local.parquet")
    body = s3.get_object(Bucket="out", Key="t/m.parquet")["Body"].read()
    assert body == (tmp_path / "local.parquet").read_bytes() and staged.bytes == len(body)
    assert "CreateMultipartUpload" in made and made.count("UploadPart") == 1  # composed, in one part
