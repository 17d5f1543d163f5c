"""after_load on S3 (moto): the version loaded is the one moved or deleted, never a newer one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3

from contracts.ledger import SourceRecord
from glue_processor.commit.after_load import apply


def _source(key: str, etag: str, version: str | None = None, status: str = "ingested") -> SourceRecord:
    return SourceRecord(
        bucket="landing",
        key=key,
        etag=etag,
        size=1,
        event_time=datetime(2026, 11, 27, tzinfo=UTC),
        manifest_uri="m",
        status=status,  # type: ignore[arg-type]
        version_id=version,
    )


def _etag(s3: Any, key: str, **kw: Any) -> str:
    return str(s3.head_object(Bucket="landing", Key=key, **kw)["ETag"].strip('"'))


def test_a_versioned_bucket_archives_the_version_loaded_and_keeps_a_newer_one(aws: None) -> None:
    s3: Any = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="landing")
    s3.put_bucket_versioning(Bucket="landing", VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket="landing", Key="in/a.json", Body=b'{"n":1}\n')["VersionId"]
    etag1 = _etag(s3, "in/a.json")
    s3.put_object(Bucket="landing", Key="in/a.json", Body=b'{"n":2}\n')  # uploaded after v1 was loaded
    failed = apply(
        [_source("in/a.json", etag1, v1)],
        lambda b, k: f"s3://{b}/{k}",
        mode="archive",
        archive_prefix="archive/",
        s3=s3,
    )
    assert failed == []
    assert s3.get_object(Bucket="landing", Key="archive/in/a.json")["Body"].read() == b'{"n":1}\n'
    assert s3.get_object(Bucket="landing", Key="in/a.json")["Body"].read() == b'{"n":2}\n'  # still current
    versions = s3.list_object_versions(Bucket="landing", Prefix="in/a.json")["Versions"]
    assert v1 not in {v["VersionId"] for v in versions}  # the loaded version itself is gone


def test_an_unversioned_bucket_deletes_only_while_the_etag_is_the_one_loaded(aws: None) -> None:
    s3: Any = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="landing")
    s3.put_object(Bucket="landing", Key="in/a.json", Body=b"1\n")
    s3.put_object(Bucket="landing", Key="in/b.json", Body=b"2\n")
    a, b = _etag(s3, "in/a.json"), _etag(s3, "in/b.json")
    s3.put_object(Bucket="landing", Key="in/b.json", Body=b"3\n")  # overwritten since it was loaded
    sources = [_source("in/a.json", a), _source("in/b.json", b), _source("in/c.json", "x", status="unreadable")]
    assert apply(sources, lambda bk, k: f"s3://{bk}/{k}", mode="delete", archive_prefix="archive/", s3=s3) == []
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="landing")["Contents"]}
    assert keys == {"in/b.json"}
