"""A write task's files are uploaded while it makes the next ones: several at a time, never more than
the bounds, all in place before the task returns, and a failed upload fails the task."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from contracts.exceptions import StorageError
from glue_processor.shared.objects import NotDeleted, ObjectStore, store_for
from glue_processor.write.uploads import BackgroundUploads


class Recording:
    """A remote store whose uploads run ``hold`` (to make them overlap or fail) and are recorded."""

    def __init__(self, hold: Any = None) -> None:
        self.hold = hold
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.uploaded: dict[str, bytes] = {}

    def upload(self, uri: str, path: Path) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if self.hold is not None:
                self.hold(uri)
            body = path.read_bytes()
            with self.lock:
                self.uploaded[uri] = body
        finally:
            with self.lock:
                self.running -= 1


def _write(uploads: BackgroundUploads, n: int, size: int = 10, bucket: str = "b") -> None:
    for i in range(n):
        uri = f"s3://{bucket}/p{i}/f.parquet"
        with uploads.store(uri).writer(uri) as path:
            path.write_bytes(bytes([i % 256]) * size)


def test_files_upload_several_at_a_time_while_the_task_goes_on() -> None:
    # Given uploads that can only finish when three run at once (one at a time would never get there)
    barrier = threading.Barrier(3, timeout=10)
    store = Recording(lambda uri: barrier.wait() if uri < "s3://b/p3" else None)
    # When a task writes six files through them
    with BackgroundUploads(lambda uri: store, in_flight=3) as uploads:  # type: ignore[arg-type,return-value]
        _write(uploads, 6)
    # Then all six are in place once the task is done, each with its bytes
    assert sorted(store.uploaded) == [f"s3://b/p{i}/f.parquet" for i in range(6)]
    assert all(body == bytes([int(uri[8])]) * 10 for uri, body in store.uploaded.items())
    assert store.most == 3


def test_no_more_files_wait_than_the_bounds() -> None:
    store = Recording(lambda uri: threading.Event().wait(0.01))
    # Given at most two uploads in flight, then at most 25 bytes in flight (files of 10 bytes)
    with BackgroundUploads(lambda uri: store, in_flight=2) as uploads:  # type: ignore[arg-type,return-value]
        _write(uploads, 8)
    assert store.most <= 2 and len(store.uploaded) == 8
    store = Recording(lambda uri: threading.Event().wait(0.01))
    with BackgroundUploads(lambda uri: store, in_flight=8, bytes_in_flight=25) as uploads:  # type: ignore[arg-type,return-value]
        _write(uploads, 8)
    assert store.most <= 2 and len(store.uploaded) == 8


def test_a_failed_upload_fails_the_task_and_leaves_no_file_behind(tmp_path: Path) -> None:
    def refuse(uri: str) -> None:
        if uri == "s3://b/p2/f.parquet":
            raise StorageError("SlowDown")

    store = Recording(refuse)
    uploads = BackgroundUploads(lambda uri: store, in_flight=4)  # type: ignore[arg-type,return-value]
    # When one of the task's uploads fails, Then the task fails with it
    with pytest.raises(StorageError, match="SlowDown"), uploads:
        _write(uploads, 5)
    assert "s3://b/p2/f.parquet" not in store.uploaded
    # And the files waiting on local disk are gone
    assert not Path(uploads._dir.name).exists()


def test_a_failed_write_uploads_nothing() -> None:
    store = Recording()
    uploads = BackgroundUploads(lambda uri: store)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="encode"), uploads, uploads.store("s3://b/x").writer("s3://b/x") as path:  # noqa: PT012
        path.write_bytes(b"half")
        raise ValueError("encode failed")
    assert store.uploaded == {}


def test_local_files_are_in_place_at_once(tmp_path: Path) -> None:
    uri = (tmp_path / "p" / "f.parquet").as_uri()
    with BackgroundUploads(store_for) as uploads:
        with uploads.store(uri).writer(uri) as path:
            path.write_bytes(b"x")
        assert (tmp_path / "p" / "f.parquet").read_bytes() == b"x"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from moto import mock_aws

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield


@pytest.mark.usefixtures("aws")
def test_files_reach_s3_whole() -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="stage")
    stores: Any = lambda uri: store_for(uri, s3_client=s3)  # noqa: E731
    with BackgroundUploads(stores, in_flight=4) as uploads:
        _write(uploads, 12, size=1000, bucket="stage")
    store: ObjectStore = uploads.store("s3://stage/p0/f.parquet")
    assert store.read("s3://stage/p0/f.parquet").data == b"\x00" * 1000  # the rest is the real store's
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="stage")["Contents"])
    assert keys == sorted(f"p{i}/f.parquet" for i in range(12))
    assert s3.get_object(Bucket="stage", Key="p7/f.parquet")["Body"].read() == b"\x07" * 1000


@pytest.mark.usefixtures("aws")
def test_a_small_file_is_one_put_and_a_large_one_a_multipart_upload(tmp_path: Path) -> None:
    from glue_processor.shared import objects

    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="stage")
    calls: list[str] = []
    s3.meta.events.register("before-call.s3.*", lambda model, **_: calls.append(model.name))
    store = objects.S3Store(s3)
    small, large = tmp_path / "small", tmp_path / "large"
    small.write_bytes(b"s" * 1000)
    large.write_bytes(bytes(range(256)) * (objects.SINGLE_PUT_BYTES // 256 + 1024))  # the bound + 256 KB
    # When a partition's small file is uploaded, Then it is a single PutObject, without the transfer
    # manager (whose setup cost as much CPU as writing the file)
    store.upload("s3://stage/p/small.parquet", small)
    assert calls == ["PutObject"]
    # And a file above the bound goes as a multipart upload
    calls.clear()
    store.upload("s3://stage/p/large.parquet", large)
    assert calls[0] == "CreateMultipartUpload" and calls[-1] == "CompleteMultipartUpload" and "PutObject" not in calls
    # And both are in S3 whole
    assert s3.get_object(Bucket="stage", Key="p/small.parquet")["Body"].read() == small.read_bytes()
    assert s3.get_object(Bucket="stage", Key="p/large.parquet")["Body"].read() == large.read_bytes()


class Deleting(Recording):
    """A remote store that also records what is deleted, and when (after how many uploads)."""

    def __init__(self, hold: Any = None) -> None:
        super().__init__(hold)
        self.deleted: list[tuple[str, int]] = []

    def delete_many(self, uris: list[str]) -> None:
        self.deleted += [(uri, len(self.uploaded)) for uri in uris]


def test_what_a_task_deletes_goes_once_its_files_are_in_place() -> None:
    # a merge task deletes its parts once merged: after its merged files are uploaded, not before
    store = Deleting(lambda uri: threading.Event().wait(0.05))
    with BackgroundUploads(lambda uri: store) as uploads:  # type: ignore[arg-type,return-value]
        _write(uploads, 3)
        uploads.store("s3://b/part-0").delete("s3://b/part-0")
        uploads.store("s3://b/part-1").delete("s3://b/part-1")
        assert store.deleted == []
    assert store.deleted == [("s3://b/part-0", 3), ("s3://b/part-1", 3)]


def test_a_failed_upload_leaves_what_the_task_deleted_for_its_retry() -> None:
    def refuse(uri: str) -> None:
        if uri == "s3://b/p1/f.parquet":
            raise StorageError("SlowDown")

    store = Deleting(refuse)

    def merge_task() -> None:
        with BackgroundUploads(lambda uri: store) as uploads:  # type: ignore[arg-type,return-value]
            _write(uploads, 2)
            uploads.store("s3://b/part-0").delete("s3://b/part-0")

    with pytest.raises(StorageError, match="SlowDown"):
        merge_task()
    assert store.deleted == []  # the merged parts are still there for Spark's retry of the task


class Client:
    """What stores made per call by ``store_for`` share: one client."""

    def __init__(self) -> None:
        self.requests: list[list[str]] = []


class PerCall:
    """A store made for each call, over one shared client (as ``store_for`` makes S3Stores)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def upload(self, uri: str, path: Path) -> None:
        pass

    def delete_many(self, uris: list[str]) -> None:
        self.client.requests.append(list(uris))


def test_a_tasks_deletes_are_one_request_whatever_store_object_asked() -> None:
    client = Client()
    with BackgroundUploads(lambda uri: PerCall(client)) as uploads:  # type: ignore[arg-type,return-value]
        for n in range(5):
            uploads.store(f"s3://b/part-{n}").delete(f"s3://b/part-{n}")
    assert client.requests == [[f"s3://b/part-{n}" for n in range(5)]]


def test_a_delete_that_fails_leaves_the_parts_to_the_clean_up_not_the_task_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Refusing(PerCall):
        def delete_many(self, uris: list[str]) -> None:
            raise NotDeleted([f"{uris[0]} (AccessDenied)"], len(uris))

    with BackgroundUploads(lambda uri: Refusing(Client())) as uploads:  # type: ignore[arg-type,return-value]
        uploads.store("s3://b/part-0").delete("s3://b/part-0")
    assert "left for the batch's clean-up" in caplog.text


def test_a_merge_that_fails_after_another_deletes_nothing() -> None:
    store = Deleting()

    def merge_task() -> None:
        with BackgroundUploads(lambda uri: store) as uploads:  # type: ignore[arg-type,return-value]
            _write(uploads, 1)
            uploads.store("s3://b/part-0").delete("s3://b/part-0")  # the first merge's parts
            raise ValueError("the second merge failed")

    with pytest.raises(ValueError, match="second merge"):
        merge_task()
    assert store.deleted == []
