"""Objects are streamed in chunks of whole lines: true line numbers, bounded memory, honest records."""

from __future__ import annotations

import gzip
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest

from glue_processor.read.task import run_task
from glue_processor.shared.objects import local_path, split_s3, store_for
from glue_processor.shared.spec import FileTask, TaskSpec
from glue_processor.shared.text import Chunk, Limits, LongLine, ReadFailed, TooLarge, chunks, is_document

TINY = Limits(chunk_bytes=64, max_line_bytes=200, max_object_bytes=10_000)


def lines_of(n: int) -> bytes:
    return b"".join(b'{"n":%d}\n' % i for i in range(1, n + 1))


def test_chunks_end_at_newlines_and_number_their_first_line() -> None:
    pieces = list(chunks(io.BytesIO(lines_of(40)), TINY))
    assert all(isinstance(p, Chunk) and bytes(p.text).endswith(b"\n") for p in pieces)
    assert len(pieces) > 3
    numbered = [(p.first_line + i, line) for p in pieces for i, line in enumerate(bytes(p.text).splitlines())]  # type: ignore[union-attr]
    assert numbered == [(i, b'{"n":%d}' % i) for i in range(1, 41)]


def test_a_line_longer_than_the_limit_is_skipped_and_reported() -> None:
    data = lines_of(3) + b'{"long":"' + b"x" * 1000 + b'"}\n' + lines_of(2)
    pieces = list(chunks(io.BytesIO(data), TINY))
    (long,) = [p for p in pieces if isinstance(p, LongLine)]
    assert long.line == 4 and long.size == 1012 and long.head.startswith(b'{"long":"xxx')
    texts = b"".join(bytes(p.text) for p in pieces if isinstance(p, Chunk))
    assert texts == lines_of(3) + lines_of(2)
    after = [p for p in pieces if isinstance(p, Chunk) and bytes(p.text).startswith(b'{"n":1}') and p.first_line > 1]
    assert [p.first_line for p in after] == [5]


def test_text_over_the_cap_stops_naming_the_next_line() -> None:
    with pytest.raises(TooLarge) as stopped:
        list(chunks(io.BytesIO(lines_of(5000)), Limits(chunk_bytes=1000, max_line_bytes=500, max_object_bytes=4096)))
    assert stopped.value.next_line > 1


def test_a_gzip_broken_midway_stops_naming_the_next_line() -> None:
    broken = gzip.compress(lines_of(200_000))[:200_000]
    with pytest.raises(ReadFailed) as stopped:
        list(chunks(gzip.GzipFile(fileobj=io.BytesIO(broken)), Limits(chunk_bytes=100_000)))
    assert stopped.value.next_line > 1


def _spec(files: list[FileTask], out: str, limits: Limits) -> TaskSpec:
    now = datetime.now(UTC)
    return TaskSpec(0, tuple(files), ("n",), f"{out}/data", f"{out}/q", 1, now, 128 * 1024 * 1024, limits=limits)


def _task(uri: str) -> FileTask:
    return FileTask(uri, uri, "e", datetime.now(UTC), "s3://m/1.json")


def _quarantine(result: Any) -> list[dict[str, Any]]:
    return [json.loads(x) for q in result.quarantine for x in local_path(q.uri).read_text().splitlines()]


def test_a_task_streams_objects_over_the_cap_alone_and_says_where_it_stopped(tmp_path: Path) -> None:
    # Given a gzip object whose text is over the cap, a small one, and one with a bad line far in
    (tmp_path / "big.json.gz").write_bytes(gzip.compress(lines_of(20_000)))
    (tmp_path / "small.json").write_bytes(lines_of(3))
    (tmp_path / "late-bad.json").write_bytes(lines_of(2_000) + b"nope\n" + lines_of(1))
    limits = Limits(chunk_bytes=4096, max_line_bytes=1024, max_object_bytes=64 * 1024)
    files = [_task(f"file://{tmp_path}/{n}") for n in ("big.json.gz", "small.json", "late-bad.json")]
    # When one task reads them in small chunks
    result = run_task(_spec(files, f"file://{tmp_path}/out", limits))
    # Then the big one is loaded up to the cap and a record says from which line it was not
    big, small, late = result.files
    assert big.status == "ingested" and 0 < big.good < 20_000 and "max_object_mb" in (big.reason or "")
    (stopped,) = [r for r in _quarantine(result) if r["kind"] == "file"]
    assert f"lines from {big.good + 1} on were not loaded" in stopped["reason"]
    # And the others load whole, the bad line with its true number across chunks
    assert (small.status, small.good) == ("ingested", 3)
    assert (late.good, late.bad) == (2_001, 1)
    assert [(r["line"], r["raw"]) for r in _quarantine(result) if r["kind"] == "line"] == [(2_001, "nope")]
    rows = [r for s in result.data for r in pq.read_table(local_path(s.uri)).to_pylist()]
    late_lines = sorted(r["_line"] for r in rows if r["_source_uri"].endswith("late-bad.json"))
    assert late_lines == [*range(1, 2_001), 2_002]


@pytest.mark.usefixtures("aws")
def test_a_task_streams_from_s3() -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="landing")
    etag = s3.put_object(Bucket="landing", Key="in/a.json.gz", Body=gzip.compress(lines_of(5_000)))["ETag"]
    uri = "s3://landing/in/a.json.gz"
    item = FileTask(uri, uri, etag.strip('"'), datetime.now(UTC), "s3://m/1.json")
    result = run_task(_spec([item], "s3://landing/out", Limits(chunk_bytes=8192)), lambda u: store_for(u, s3_client=s3))
    assert [(f.status, f.good) for f in result.files] == [("ingested", 5_000)]
    (staged,) = result.data
    body = s3.get_object(Bucket="landing", Key=split_s3(staged.uri)[1])["Body"].read()
    assert sorted(pq.read_table(io.BytesIO(body)).column("_line").to_pylist()) == list(range(1, 5_001))


@pytest.mark.parametrize("gz", [False, True])
def test_the_sniff_reads_its_mib_whatever_the_block_size_and_a_stop_names_its_line(gz: bool) -> None:
    # Given a pretty-printed document whose first object spans many 64-byte blocks (the sniff calls
    # a first object a document only once it closes: it must see past the first block)
    records = [{"k": i, "v": "x" * 40} for i in range(3)]
    text = "\n".join(json.dumps(r, indent=4) for r in records).encode()
    limits = Limits(chunk_bytes=64, max_line_bytes=2000, max_object_bytes=10_000)

    def stream(body: bytes) -> Any:
        return gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(body))) if gz else io.BytesIO(body)

    pieces = list(chunks(stream(text), limits, sniff=True))
    # Then it is read record by record, each numbered by the line it starts on
    chunked = [p for p in pieces if isinstance(p, Chunk) and p.starts is not None]
    assert len(chunked) == len(pieces)
    got = [
        (int(s), json.loads(r)["k"]) for p in chunked for s, r in zip(p.starts, bytes(p.text).splitlines(), strict=True)
    ]
    assert got == [(1, 0), (5, 1), (9, 2)]
    # And NDJSON over the object cap, whose cap is met while the sniff reads ahead, still stops at
    # the line it reached (not at the line the sniff started on)
    over = Limits(chunk_bytes=64, max_line_bytes=200, max_object_bytes=1000)
    with pytest.raises(TooLarge) as stopped:
        list(chunks(stream(lines_of(500)), over, sniff=True))
    with pytest.raises(TooLarge) as unsniffed:
        list(chunks(stream(lines_of(500)), over))
    assert stopped.value.next_line == unsniffed.value.next_line > 1


@pytest.mark.parametrize(
    ("text", "document"),
    [
        (b'{"id":"cut","v":\n{"a":1}\n{"a":2}\n', False),  # a first line cut short, then NDJSON
        (b'{"id":"cut","v":\n{"a":1}\n', False),  # ... with one line after it
        (b'{"id":"cut","v":\n  \n{"a":1}\n\t\n{"a":2}\n', False),  # ... blank lines between
        (b'{"id":"cut","v":\r\n{"a":1}\r\n{"a":2}\r\n', False),  # ... CRLF
        (b'{"a":1}\n{"a":2}\n', False),  # NDJSON
        (b'{"data": [\n{"x":1}\n]}\n', True),  # an export of one element a line (a review's cases)
        (b'{"data":[\n{"x":1}\n,{"x":2}\n]}', True),  # ... commas first
        (b'{"a":\n{"b":1}\n}', True),
        (b'{"a":\r\n{"b":1}\r\n}', True),
        (b'{"type":"FeatureCollection","features":[\n{"type":"Feature"}\n]}\n', True),
        (json.dumps({"a": 1, "b": [1, {"c": "}"}]}, indent=2).encode(), True),  # json.dumps, indented
        (b'\xef\xbb\xbf{\n  "a": 1\n}\n', True),  # ... after a byte-order mark
        (b'[{"a":1}]\n', True),  # an array
        (b'{"id":"cut","v":\n{"a":1}\nnot json\n', True),  # the limit: cut twice in its first lines
    ],
)
def test_what_the_sniff_calls_a_document(text: bytes, document: bool) -> None:
    assert is_document(text) == document
