"""The surge path (issue 24, the slow backfill): the manifest Lambda's signal makes the control plane
list the manifests and resize for a dump at once, instead of the next tick on CloudWatch datapoints
a minute behind. Against moto S3, Glue and CloudWatch, through the Lambda's handler."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from contracts.layout import manifest_key
from contracts.manifest import Manifest, ManifestEntry
from contracts.surge import DETAIL_TYPE, SOURCE, SurgeDetail
from lambdas.control_plane import handler
from lambdas.control_plane.decision import Observation
from lambdas.control_plane.manifests import S3ManifestListing
from lambdas.control_plane.settings import load_settings
from lambdas.control_plane.surge import SURGE_WINDOW_S, is_surge, newest_minute, with_written
from tests.lambdas.control_plane.test_handler_moto import DIMS, _put, invoke, plane, runs, script

__all__ = ["plane"]  # the fixture, used by name

MANIFESTS = "ingest-manifests"
GB = 10**9


def _manifest(n: int, size: int, *, event_time: datetime | None = None) -> Manifest:
    at = event_time or datetime.now(UTC)
    entry = ManifestEntry(bucket="landing", key=f"in/{n}.json", size=size, etag=f"e{n}", event_time=at)
    return Manifest.of([entry])


def _write(n: int, size: int, *, event_time: datetime | None = None, prefix: str = "manifests/") -> str:
    key = manifest_key(prefix, _manifest(n, size, event_time=event_time))
    boto3.client("s3", region_name="us-east-1").put_object(Bucket=MANIFESTS, Key=key, Body=b"{}")
    return key


@pytest.fixture
def surging(plane: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A 2-worker run, RUNNING for 10 minutes and keeping up: small fresh backlog datapoints."""
    monkeypatch.setenv("MANIFEST_BUCKET", MANIFESTS)
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=MANIFESTS)
    handler._plane.cache_clear()
    invoke()
    script(runs(plane)[0]["Id"], "RUNNING", ago_s=600)
    lam = [{"Name": "service", "Value": "manifest-builder"}]
    for minute in range(1, 8):
        _put("BytesPerManifest", [(minute, 1e9)], lam, unit="Bytes")  # ~17 MB/s
    _put("BacklogDataBytes", [(m, 0.5e9) for m in range(0, 8)], DIMS, unit="Bytes")
    _put("OldestBacklogAge", [(m, 30) for m in range(0, 8)], DIMS, unit="Seconds")
    return plane


# ---------------------------------------------------------------- the listing
def test_the_listing_sums_the_data_bytes_in_the_names_of_manifests_written_since(aws: None) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=MANIFESTS)
    before = datetime.now(UTC) - timedelta(seconds=5)
    _write(1, 3 * GB)
    _write(2, 4 * GB)
    s3.put_object(Bucket=MANIFESTS, Key="manifests/notes.txt", Body=b"x")  # no data bytes in its name
    _write(3, 100 * GB, prefix="other/")  # another prefix
    listing = S3ManifestListing(s3, MANIFESTS, "manifests")
    written = listing.written_since(before)
    assert sorted(b for _, b in written) == [3 * GB, 4 * GB]
    assert all(before < t <= datetime.now(UTC) for t, _ in written)
    # written before the moment asked about: not listed (S3's LastModified has whole seconds)
    assert listing.written_since(datetime.now(UTC) + timedelta(seconds=1)) == []


def test_the_listing_starts_at_the_names_of_the_signal_s_oldest_event(aws: None) -> None:
    # the listing starts at the names of 15 minutes before what it asks about, so it stays a page or
    # two however many manifests the prefix keeps; a queue an hour behind names its manifests after
    # events an hour old, which the signal says (SurgeDetail.oldest)
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=MANIFESTS)
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    _write(1, 5 * GB, event_time=hour_ago)
    _write(2, 2 * GB, event_time=datetime.now(UTC) - timedelta(minutes=5))
    listing = S3ManifestListing(s3, MANIFESTS, "manifests/")
    since = datetime.now(UTC) - timedelta(seconds=30)
    assert [b for _, b in listing.written_since(since)] == [2 * GB]
    assert sorted(b for _, b in listing.written_since(since, named_from=hour_ago)) == [2 * GB, 5 * GB]


# ---------------------------------------------------------------- the pure parts
def test_a_surge_is_more_than_the_largest_cluster_clears_in_the_window() -> None:
    s = load_settings(job_name="j", max_workers=11, worker_mb_s=56.0)
    ceiling = 10 * 56e6 * SURGE_WINDOW_S  # 10 executors
    assert not is_surge(ceiling, Observation(), s)
    assert is_surge(ceiling + 1, Observation(), s)
    # at the rate the runs taught, not the setting
    assert is_surge(ceiling / 2, Observation(worker_bytes_per_s=20e6), s)


def test_the_listed_bytes_join_the_newest_datapoint_never_counted_twice() -> None:
    now = datetime(2026, 11, 25, 12, 5, 20, tzinfo=UTC)
    minute = datetime(2026, 11, 25, 12, 4, tzinfo=UTC)
    obs = Observation(backlog_bytes=[1e9, 2e9], backlog_age_s=[40, 50], data_age_s=80)  # the 12:04 minute
    assert newest_minute(obs, now) == minute
    # written after the datapoint's minute: in no datapoint, added to it
    dump = [(minute + timedelta(seconds=70), 99e9)]
    seen = with_written(obs, dump, now)
    assert list(seen.backlog_bytes) == [1e9, 2e9, 101e9]
    assert list(seen.backlog_age_s) == [40, 50, 50]
    # and the last minute's writes are the newest arrival minute: the dump is young, and arriving
    assert list(seen.arrival_bytes_per_s) == [99e9 / 60]
    # written within its minute: maybe measured already, so the larger of the two, not their sum
    assert with_written(obs, [(minute + timedelta(seconds=10), 99e9)], now).backlog_bytes[-1] == 99e9
    assert with_written(obs, [(minute + timedelta(seconds=10), 1e9)], now) is obs
    assert with_written(obs, [(minute + timedelta(seconds=10), 5e9), *dump], now).backlog_bytes[-1] == 104e9
    # nothing to add to without a datapoint
    assert with_written(Observation(), dump, now) == Observation()


# ---------------------------------------------------------------- through the handler
def test_a_dump_scales_up_on_the_signal_while_the_tick_still_holds(surging: Any) -> None:
    # Given 100 GB of manifests written seconds ago, in no CloudWatch datapoint yet
    for n in range(10):
        _write(n, 10 * GB)
    # Then the scheduled tick, on CloudWatch alone, sees a 2-worker run keeping up and holds (today's
    # path: the dump waits for the next datapoints, up to 3 minutes)
    tick = invoke()
    assert tick["decision"]["action"] == "none", tick["decision"]["reason"]
    # When the manifest Lambda's signal arrives
    body = invoke({"command": "surge"})
    # Then the control plane counted the dump from the listing and scaled up to the ceiling at once
    assert body["written_bytes"] == 100 * GB
    assert body["decision"]["action"] == "scale", body["decision"]["reason"]
    assert body["decision"]["desired_workers"] == 10
    assert body["decision"]["reason"].startswith("surge: backlog 100.0 GB with the manifests listed")
    # the datapoint of this minute (0.5 GB) may or may not have measured them: the larger, not the sum
    assert body["decision"]["inputs"]["backlog_bytes"][-1] == pytest.approx(100 * GB)
    assert runs(surging)[0]["JobRunState"] == "STOPPED"  # the graceful stop of the resize


def test_the_signal_as_eventbridge_delivers_it_counts_a_lagging_queue_s_manifests(surging: Any) -> None:
    # Given a queue an hour behind: 100 GB of manifests written now, named after events an hour old
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    for n in range(10):
        _write(n, 10 * GB, event_time=hour_ago)
    # When the manifest Lambda's event arrives whole (the rule has no Input), saying how old
    event = {
        "version": "0",
        "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": DETAIL_TYPE,
        "source": SOURCE,
        "account": "123456789012",
        "time": datetime.now(UTC).isoformat(),
        "region": "us-east-1",
        "resources": [],
        "detail": SurgeDetail(
            manifest_uri=f"s3://{MANIFESTS}/manifests/", bytes=10 * GB, manifests=10, oldest=hour_ago
        ).model_dump(mode="json"),
    }
    body = invoke(event)
    # Then the listing found them all, and the job is resized for them
    assert body["written_bytes"] == 100 * GB
    assert body["decision"]["action"] == "scale" and body["decision"]["desired_workers"] == 10


def test_a_signal_without_a_dump_changes_nothing(surging: Any) -> None:
    # Given 5 GB written: a lot for 2 workers, but less than 10 max workers clear in 120 s (67 GB)
    _write(1, 5 * GB)
    body = invoke({"command": "surge"})
    assert body["result"].startswith("no surge: 5.0 GB written in 120s, not over the 60.5 GB")
    assert "decision" not in body
    assert runs(surging)[0]["JobRunState"] == "RUNNING"


def test_a_signal_without_a_manifest_bucket_is_ignored(plane: Any) -> None:
    body = invoke({"command": "surge"})
    assert body == {"command": "surge", "result": "ignored: no MANIFEST_BUCKET, or not sized by need"}


def test_a_listing_that_fails_is_reported_and_leaves_the_job_to_the_tick(
    plane: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MANIFEST_BUCKET", "no-such-bucket")
    handler._plane.cache_clear()
    invoke()
    body = invoke({"command": "surge"})
    assert body["result"].startswith("ignored: listing s3://no-such-bucket/manifests/ failed")
