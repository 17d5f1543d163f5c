"""The driver's file operations: a local write from Python that Hadoop reads as its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from glue_processor.hadoop_fs import HadoopFS
from glue_processor.local.layout import local_uri

pytestmark = pytest.mark.spark


def test_a_local_write_replaces_a_file_hadoop_wrote_and_hadoop_reads_it(spark: Any, tmp_path: Path) -> None:
    fs = HadoopFS(spark)
    target = tmp_path / "work dir ü" / "_commits" / "q" / "000000000001.published"
    uri = local_uri(target)
    # Given a file Hadoop's local file system wrote
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    out = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).create(path, True)
    out.write(bytearray(b"first version, longer than the next"))
    out.close()
    assert target.read_bytes().startswith(b"first")
    # When the driver writes it again
    fs.write_bytes(uri, b"42")
    # Then Hadoop reads the new bytes, at the path Hadoop takes the URI for (literally, no decoding)
    assert fs.read_bytes(uri) == b"42" and target.read_bytes() == b"42"
    # and a write to a directory not there yet makes it, leaving no temporary file behind
    fresh = tmp_path / "new" / "dir" / "marker"
    fs.write_bytes(local_uri(fresh), b"")
    assert fs.exists(local_uri(fresh)) and fresh.read_bytes() == b""
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]
