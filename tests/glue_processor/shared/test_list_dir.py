"""A directory listed from Python (the backlog probe's and the intake's listing of the manifests):
what Hadoop's listing through py4j said, at one request per 1,000 entries on S3."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

from glue_processor.hadoop_fs import HadoopFS
from glue_processor.shared.objects import S3Store, store_for


def _dir(root: Path) -> Path:
    d = root / "manifests"
    (d / "_archive").mkdir(parents=True)
    for n, name in enumerate(["20261127T000000Z-a.json", "b c+%.json", ".tmp-x.json"]):
        (d / name).write_bytes(b"x" * (10 + n))
        os.utime(d / name, ns=(1_700_000_000_123_456_789 + n * 10**9, 1_700_000_000_123_456_789 + n * 10**9))
    return d


def test_a_local_listing_says_what_hadoops_says(spark: Any, tmp_path: Path) -> None:
    uri = _dir(tmp_path).as_uri()
    ours = {i.name: (i.size, i.is_dir, i.modified_ms) for i in store_for(uri).list_dir(uri)}
    hadoop = {i.name: (i.size, i.is_dir, i.modified_ms) for i in HadoopFS(spark).list(uri)}
    # a directory's size and time are not used (the probe and the intake take files)
    assert {n: v for n, v in ours.items() if not v[1]} == {n: v for n, v in hadoop.items() if not v[1]}
    assert ours["b c+%.json"] == (11, False, 1_700_000_001_123)  # milliseconds, as File.lastModified()
    assert ours["_archive"][1] and hadoop["_archive"][1]
    assert {i.uri for i in store_for(uri).list_dir(uri + "/")} == {f"{uri}/{n}" for n in ours}


def test_a_local_directory_that_is_not_there_lists_nothing(tmp_path: Path) -> None:
    assert store_for((tmp_path / "none").as_uri()).list_dir((tmp_path / "none").as_uri()) == []


@mock_aws
def test_an_s3_prefix_lists_its_direct_children_over_pages() -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="landing-b")
    for n in range(1_003):  # past one ListObjectsV2 page (1,000 keys)
        s3.put_object(Bucket="landing-b", Key=f"manifests/m{n:04d}.json", Body=b"x" * (n % 7))
    s3.put_object(Bucket="landing-b", Key="manifests/", Body=b"")  # a console's "folder"
    s3.put_object(Bucket="landing-b", Key="manifests/_archive/old.json", Body=b"x")
    s3.put_object(Bucket="landing-b", Key="manifests-other/m.json", Body=b"x")  # beside the prefix, not in it
    calls: list[str] = []
    s3.meta.events.register("before-call.s3.ListObjectsV2", lambda **_: calls.append("list"))
    listing = S3Store(s3).list_dir("s3://landing-b/manifests")
    files = {i.name: i for i in listing if not i.is_dir}
    assert len(files) == 1_003 and files["m0005.json"].size == 5
    assert files["m0005.json"].uri == "s3://landing-b/manifests/m0005.json"
    head = s3.head_object(Bucket="landing-b", Key="manifests/m0005.json")
    assert files["m0005.json"].modified_ms == int(head["LastModified"].timestamp() * 1000)
    assert [(i.name, i.uri) for i in listing if i.is_dir] == [("_archive", "s3://landing-b/manifests/_archive")]
    assert len(calls) == 2  # a request per 1,000 entries
    assert S3Store(s3).list_dir("s3://landing-b/nothing-here/") == []
