"""Reconcile and replay, locally and against moto S3/SQS."""

from __future__ import annotations

import functools
import json
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.ledger import BatchStats, CommitRecord, SourceRecord
from glue_processor.local.comparison import LandedObject, Load, Report, reconcile, reconcile_bounded
from glue_processor.local.feeder import md5_of
from glue_processor.local.layout import LocalLayout
from glue_processor.local.reconcile import (
    loads_of,
    main,
    s3_landing,
    s3_landing_versions,
    s3_records,
    sqs_requeue,
)
from lambdas.manifest_builder.events import parse_body, to_entry

T0 = datetime(2026, 11, 22, tzinfo=UTC)


def record(batch_id: int, *sources: tuple[str, str, str, str]) -> CommitRecord:
    return CommitRecord(
        query_id="q",
        batch_id=batch_id,
        attempt="a",
        committed_at=T0,
        partition="dt=2026-11-22",
        manifests=(),
        data_files=(),
        quarantine_files=(),
        stats=BatchStats(),
        sources=tuple(
            SourceRecord(
                bucket=b,
                key=k,
                etag=e,
                size=1,
                event_time=T0,
                manifest_uri="m",
                status=st,
                reason=None if st == "ingested" else "why",
            )
            for b, k, e, st in sources
        ),
    )


Compare = Callable[..., Report]


@pytest.fixture(params=["in memory", "spilled"])
def compare(request: pytest.FixtureRequest, tmp_path: Path) -> Compare:
    """The comparison, and the same comparison held to one load at a time (every part spilled and
    split again): each test below holds for both."""
    if request.param == "in memory":
        return reconcile
    return functools.partial(reconcile_bounded, limit=1, parts=2, spill_dir=tmp_path)


def test_reconcile_reports_missing_failed_and_twice(compare: Compare) -> None:
    landed = [LandedObject("b", k, "e", 1) for k in ("ok.json", "lost.json", "gone.json", "twice.json")]
    records = [
        record(
            0,
            ("b", "ok.json", "e", "ingested"),
            ("b", "twice.json", "e", "ingested"),
            ("b", "gone.json", "e", "missing"),
        ),
        record(1, ("b", "twice.json", "e", "ingested"), ("b", "ok.json", "e", "duplicate")),
    ]
    report = compare(landed, loads_of(records))
    assert [o.key for o in report.never_ingested] == ["lost.json", "gone.json"]
    assert report.failed == {"s3://b/gone.json": "missing: why"}
    assert report.ingested_twice == {"s3://b/twice.json@e": [0, 1]}
    assert (report.landed, report.ingested) == (4, 2)


def test_an_object_an_earlier_routing_ignored_is_never_ingested_once_the_routing_takes_it(compare: Compare) -> None:
    landed = [LandedObject("b", k, "e", 1) for k in ("orders/1.json", "misc/2.json")]
    loads = loads_of([record(0, ("b", "orders/1.json", "e", "ignored"), ("b", "misc/2.json", "e", "ignored"))])
    # Given the routing now takes orders/ (not misc/)
    report = compare(landed, loads, routed=lambda key: key.startswith("orders/"))
    # Then the orders object is never ingested (a requeue loads it); the other stays left out on purpose
    assert [o.key for o in report.never_ingested] == ["orders/1.json"] and report.ignored == 1
    assert report.failed["s3://b/orders/1.json"].startswith("ignored: by an earlier routing file")
    # And without the current routing, both are accounted for, as before
    assert compare(landed, loads_of([record(0, ("b", "orders/1.json", "e", "ignored"))])).ignored == 1


def test_versions_a_mirroring_table_superseded_replaced_or_retracted_are_accounted_for(compare: Compare) -> None:
    # Given a versioned listing and its load history: v1 loaded then replaced by v2, v0 arriving late
    # (superseded), and a deleted key whose rows were retracted
    landed = [LandedObject("b", "a.json", e, 1) for e in ("v0", "v1", "v2")] + [LandedObject("b", "gone.json", "g", 1)]
    history = [
        Load("b", "a.json", "v1", "ingested", None, 0),
        Load("b", "gone.json", "g", "ingested", None, 0),
        Load("b", "a.json", "v2", "ingested", None, 1),
        Load("b", "a.json", "v1", "replaced", "replaced by eTag v2", 1),
        Load("b", "a.json", "v0", "superseded", "an earlier version than the one loaded", 2),
        Load("b", "gone.json", "g", "retracted", "its key was deleted", 2),
        Load("b", "gone.json", "removed-0C", "deleted", "its rows are removed", 2),
    ]
    report = compare(landed, history)
    # Then every version is accounted for: nothing never ingested, nothing twice
    assert (report.ingested, report.superseded, report.never_ingested, report.ingested_twice) == (3, 1, [], {})


_KEYS = st.sampled_from(["a.json", "b.json", "c\td.json", "ü/e.json", "f.json"])
_LANDED = st.builds(LandedObject, st.just("b"), _KEYS, st.sampled_from(["e1", "e2"]), st.integers(0, 9))
_LOADS = st.builds(
    Load,
    st.just("b"),
    _KEYS,
    st.sampled_from(["e1", "e2"]),
    st.sampled_from(["ingested", "empty", "duplicate", "missing", "ignored", "superseded", "replaced"]),
    st.sampled_from([None, "why"]),
    st.integers(0, 5),
    st.sampled_from([None, "events", "orders"]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_LANDED, max_size=12), st.lists(_LOADS, max_size=30), st.integers(1, 4), st.booleans())
def test_the_spilled_comparison_is_the_in_memory_one(
    landed: list[LandedObject], loads: list[Load], limit: int, routed: bool
) -> None:
    # Given any listing and history (crafted keys, repeated versions, every status), held to a few loads
    # at a time, split in two or three
    route = (lambda key: key != "f.json") if routed else None
    memory = reconcile(landed, loads, routed=route)
    spilled = reconcile_bounded(landed, loads, routed=route, limit=limit, parts=2 + limit % 2)
    # Then its report is the same, the never-ingested in the order they landed
    assert spilled.as_json() == memory.as_json()
    assert spilled.never_ingested == memory.never_ingested


def test_the_comparison_holds_its_limit_not_the_history(tmp_path: Path) -> None:
    """A week at the seed's load is 33.6M loads; in memory that is ~13 GB. Here: 120,000 loads of
    60,000 objects, and 600 more landed that never loaded, against a limit of 10,000 loads."""

    def loads() -> Iterator[Load]:
        for n in range(60_000):  # each loaded, then its event redelivered; every 1,000th loaded twice
            key, etag = f"in/2026/12/05/{n:08d}.ndjson", f"{n:032x}"
            yield Load("bucket", key, etag, "ingested", None, n, "events")
            yield Load("bucket", key, etag, "ingested" if n % 1000 == 0 else "duplicate", None, n + 1, "events")

    def landed() -> Iterator[LandedObject]:
        for n in range(60_600):  # the 60,000 loaded, and 600 that never were
            yield LandedObject("bucket", f"in/2026/12/05/{n:08d}.ndjson", f"{n:032x}", 1024)

    def peak(compare: Compare) -> tuple[Report, int]:
        tracemalloc.start()
        try:
            report = compare(landed(), loads())
            return report, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    memory, whole = peak(reconcile)
    spilled, bounded = peak(functools.partial(reconcile_bounded, limit=10_000, spill_dir=tmp_path))
    # Then both say the same: 60,000 of the landed loaded, 600 never, 60 loaded twice
    assert spilled.as_json() == memory.as_json()
    assert (spilled.landed, spilled.ingested, len(spilled.never_ingested)) == (60_600, 60_000, 600)
    assert len(spilled.ingested_twice) == 60
    # and the spilled one held under a fifth of what the whole index took (what it holds: the limit's
    # 10,000 loads, one part's index, the report)
    assert bounded < whole / 5, (bounded, whole)
    assert not list(tmp_path.iterdir())  # its spill files are gone


def test_local_requeue_feeds_the_missing_through_the_manifest_builder(tmp_path: Path, capsys) -> None:
    layout = LocalLayout(tmp_path / "w")
    layout.create()
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.json").write_text('{"a":1}\n')
    (data / "b c.json").write_text('{"b":1}\n')
    layout.link_landing(data)
    commits = layout.output / "_commits" / "q"
    commits.mkdir(parents=True)
    (commits / "000000000000.json").write_text(
        record(0, ("local-landing", "a.json", md5_of(data / "a.json"), "ingested")).model_dump_json()
    )

    assert main(["--workdir", str(layout.workdir)]) == 3  # never ingested (no load history: the ledger)
    capsys.readouterr()
    # requeued, every object is on its way: nothing is left to do but make run
    assert main(["--workdir", str(layout.workdir), "--requeue"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["never_ingested"] == ["s3://local-landing/b c.json"] and out["requeued"] == 1
    (manifest,) = list(layout.manifests.glob("*.json"))
    assert [e["key"] for e in json.loads(manifest.read_text())["entries"]] == ["b c.json"]


def test_aws_reconcile_and_requeue_to_sqs(aws: None) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    sqs = boto3.client("sqs", region_name="us-east-1")
    s3.create_bucket(Bucket="landing")
    s3.create_bucket(Bucket="out")
    for key in ("in/a.json", "in/b+ü.json", "in/skip.csv"):
        s3.put_object(Bucket="landing", Key=key, Body=b'{"x":1}\n')
    etag = s3.head_object(Bucket="landing", Key="in/a.json")["ETag"].strip('"')
    s3.put_object(
        Bucket="out",
        Key="data/_commits/q/000000000000.json",
        Body=record(0, ("landing", "in/a.json", etag, "ingested")).model_dump_json().encode(),
    )
    queue = sqs.create_queue(QueueName="landing-events")["QueueUrl"]

    report = reconcile(s3_landing(s3, "s3://landing/in/"), loads_of(s3_records(s3, "s3://out/data")))
    assert [o.key for o in report.never_ingested] == ["in/b+ü.json"]
    assert sqs_requeue(sqs, queue, report.never_ingested) == 1

    (msg,) = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    (event,) = parse_body(msg["Body"])  # what the manifest Lambda will read
    entry = to_entry(event)
    assert (entry.bucket, entry.key, entry.etag) == ("landing", "in/b+ü.json", report.never_ingested[0].etag)


def test_aws_reconcile_compares_versions_not_only_current_keys(aws: None) -> None:
    # Given a versioned landing bucket where an object was overwritten, and a ledger that has
    # only the newer version (the older one was lost)
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="landing")
    s3.create_bucket(Bucket="out")
    s3.put_bucket_versioning(Bucket="landing", VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket="landing", Key="in/a.json", Body=b'{"x":1}\n')
    v2 = s3.put_object(Bucket="landing", Key="in/a.json", Body=b'{"x":2}\n')
    s3.put_object(
        Bucket="out",
        Key="data/_commits/q/000000000000.json",
        Body=record(0, ("landing", "in/a.json", v2["ETag"].strip('"'), "ingested")).model_dump_json().encode(),
    )
    # When reconcile lists versions
    report = reconcile(s3_landing_versions(s3, "s3://landing/in/"), loads_of(s3_records(s3, "s3://out/data")))
    # Then the lost version is reported, by its version id; listing current keys alone would not see it
    assert [(o.key, o.version_id) for o in report.never_ingested] == [("in/a.json", v1["VersionId"])]
    current = reconcile(s3_landing(s3, "s3://landing/in/"), loads_of(s3_records(s3, "s3://out/data")))
    assert current.never_ingested == []


def test_aws_reconcile_mistakes_are_one_line(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a landing bucket, and a reconcile against a database with no load history, a bucket
    # that does not exist, and --requeue without its queue: one line each, exit 2, no traceback
    from glue_processor.local.reconcile import main

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="landing")
    assert main(["--landing", "s3://landing/in/", "--database", "ndjson_ingst"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: DATABASE=ndjson_ingst: no load history load_history there"), err
    assert "give --from ledger and OUTPUT instead" in err and "Traceback" not in err
    assert main(["--landing", "s3://no-such-bucket/in/", "--from", "ledger", "--output", "s3://landing/data"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: AWS refused the reconcile: ") and "NoSuchBucket" in err, err
    assert main(["--landing", "s3://landing/in/", "--database", "d", "--requeue"]) == 2
    assert capsys.readouterr().err.startswith("error: --requeue on AWS needs --queue-url")
