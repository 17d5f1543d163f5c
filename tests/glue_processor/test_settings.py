from __future__ import annotations

import pytest

from contracts.exceptions import ConfigError
from glue_processor.main import parse_settings

BASE = [
    "--manifest_uri",
    "s3://m/manifests/",
    "--output_uri",
    "s3://o/data",
    "--quarantine_uri",
    "s3://o/quarantine",
    "--checkpoint_uri",
    "s3://a/checkpoints/q1",
]


def test_glue_style_argv_with_glue_arguments() -> None:
    argv = [
        "--JOB_NAME",
        "ingest",
        "--job-bookmark-option",
        "job-bookmark-disable",
        "--enable-metrics",
        "true",
        # Glue passes every job argument, its own whose value looks like a flag included
        "--python-modules-installer-option",
        "--no-index",
        *BASE,
        "--max_files_per_trigger",
        "4",
        "--allowed_buckets",
        "a, b",
    ]
    s = parse_settings(argv)
    assert s.max_files_per_trigger == 4
    assert s.allowed_buckets == ("a", "b")
    assert s.manifest_uri == "s3://m/manifests"
    assert s.trigger_interval_seconds == 30 and s.target_file_mb == 128


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max_file_per_trigger", "2"], "unknown setting(s) --max_file_per_trigger"),
        (["--max_files_per_trigger", "zero"], "--max_files_per_trigger"),
        (["--max_files_per_trigger", "0"], "greater than or equal to 1"),
        (["--trigger", "sometimes"], "'processing-time' or 'available-now'"),
        (["--target_file_mb", "99999"], "--target_file_mb"),
        (["--source_uri_template", "s3://x/{key}"], "{bucket}"),
        (["--partition_limit_per_batch", "999"], "partition_limit_per_batch must be at least max_partitions_per_batch"),
        (["--partition_limit_per_batch", "0"], "--partition_limit_per_batch"),
        # the job lists and reads its manifests from Python (shared/objects.py: S3 or a local disk)
        (["--manifest_uri", "hdfs://nn/manifests"], "--manifest_uri"),
        (["--output_uri", "hdfs://nn/data"], "--output_uri"),
    ],
)
def test_bad_settings_fail_at_start_naming_the_setting(extra: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings([*BASE, *extra])
    assert message in str(info.value)


def test_spark_alone_writes_the_checkpoint_so_it_may_be_on_hdfs() -> None:
    assert parse_settings([*BASE, "--checkpoint_uri", "hdfs://nn/cp"]).checkpoint_uri == "hdfs://nn/cp"


def test_missing_required_paths() -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(["--manifest_uri", "s3://m/x"])
    assert "--output_uri" in str(info.value) and "--checkpoint_uri" in str(info.value)


def test_overlapping_locations_are_rejected() -> None:
    argv = [*BASE[:-1], "s3://o/data/_checkpoint"]
    with pytest.raises(ConfigError, match="overlap"):
        parse_settings(argv)


def test_the_partition_limit_unset_is_never_under_the_bound_that_alarms() -> None:
    # a job whose bound was raised past 10,000 before the limit existed keeps starting, and keeps
    # every partition it wrote
    assert parse_settings([*BASE]).partition_limit_per_batch == 10_000
    assert parse_settings([*BASE, "--max_partitions_per_batch", "20000"]).partition_limit_per_batch == 20_000
    assert (
        parse_settings(
            [*BASE, "--partition_limit_per_batch", "500", "--max_partitions_per_batch", "100"]
        ).partition_limit_per_batch
        == 500
    )
