"""The manifest builder against moto: S3 put -> real notification on SQS -> handler -> manifests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote_plus

import boto3
import pytest

from contracts.manifest import Manifest
from lambdas.manifest_builder import handler
from tests.helpers import FakeLambdaContext, lambda_sqs_event, sqs_record

LANDING = "landing-bucket"
MANIFESTS = "manifest-bucket"


class Pipeline:
    def __init__(self) -> None:
        self.s3 = boto3.client("s3", region_name="us-east-1")
        self.sqs = boto3.client("sqs", region_name="us-east-1")
        self.s3.create_bucket(Bucket=LANDING)
        self.s3.create_bucket(Bucket=MANIFESTS)
        self.queue_url = self.sqs.create_queue(QueueName="landing-events")["QueueUrl"]
        self.queue_arn = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.s3.put_bucket_notification_configuration(
            Bucket=LANDING,
            NotificationConfiguration={
                "QueueConfigurations": [{"QueueArn": self.queue_arn, "Events": ["s3:ObjectCreated:*"]}]
            },
        )

    def put(self, key: str, body: bytes = b'{"a":1}\n') -> None:
        self.s3.put_object(Bucket=LANDING, Key=key, Body=body)

    def receive(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages", [])
            if not got:
                return messages
            messages.extend(got)

    def invoke(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return handler.lambda_handler(lambda_sqs_event(messages, self.queue_arn), FakeLambdaContext())

    def manifests(self) -> dict[str, Manifest]:
        listed = self.s3.list_objects_v2(Bucket=MANIFESTS).get("Contents", [])
        return {
            o["Key"]: Manifest.from_json(self.s3.get_object(Bucket=MANIFESTS, Key=o["Key"])["Body"].read())
            for o in listed
        }


@pytest.fixture
def pipeline(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    monkeypatch.setenv("MANIFEST_BUCKET", MANIFESTS)
    monkeypatch.setenv("MANIFEST_PREFIX", "manifests")
    monkeypatch.setenv("SOURCE_PREFIX", "incoming/")
    handler._settings.cache_clear()
    handler._writer.cache_clear()
    yield Pipeline()
    handler._settings.cache_clear()
    handler._writer.cache_clear()


def test_put_objects_become_one_manifest_with_decoded_keys(pipeline: Pipeline) -> None:
    # Given objects whose keys need URL-encoding in S3 events
    keys = ["incoming/a b.json", "incoming/ü+%.ndjson", "incoming/x/y.jsonl.gz"]
    for key in keys:
        pipeline.put(key)
    messages = pipeline.receive()

    # When the handler gets the real notifications
    response = pipeline.invoke(messages)

    # Then one manifest lists every object with its decoded key, size, eTag and event time
    assert response == {"batchItemFailures": []}
    manifests = pipeline.manifests()
    assert len(manifests) == 1
    ((key, manifest),) = manifests.items()
    assert key.startswith("manifests/") and key.endswith(f"{manifest.manifest_id[:32]}-{manifest.total_bytes}b.json")
    assert sorted(e.key for e in manifest.entries) == sorted(keys)
    for entry in manifest.entries:
        head = pipeline.s3.head_object(Bucket=LANDING, Key=entry.key)
        assert entry.etag == head["ETag"].strip('"')
        assert entry.size == head["ContentLength"]
        assert entry.bucket == LANDING


def test_prefix_and_suffix_filter(pipeline: Pipeline) -> None:
    # suffixes compare as S3's notification filter compares them (case-sensitively); any .gz is taken
    keys = ["incoming/keep.json", "incoming/skip.csv", "elsewhere/skip.json", "incoming/UPPER.NDJSON"]
    for key in [*keys, "incoming/firehose-1-2026-11-22-10-00-00-abc.gz"]:
        pipeline.put(key)
    assert pipeline.invoke(pipeline.receive()) == {"batchItemFailures": []}
    (manifest,) = pipeline.manifests().values()
    assert sorted(e.key for e in manifest.entries) == [
        "incoming/firehose-1-2026-11-22-10-00-00-abc.gz",
        "incoming/keep.json",
    ]


def test_a_prefix_is_a_plain_string_prefix(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given SOURCE_PREFIX=incoming/app- (a valid S3 filter prefix, not a folder)
    monkeypatch.setenv("SOURCE_PREFIX", "incoming/app-")
    handler._settings.cache_clear()
    pipeline.put("incoming/app-1.json")
    pipeline.put("incoming/other.json")
    # Then the objects it names are taken (it used to become "incoming/app-/" and take nothing)
    assert pipeline.invoke(pipeline.receive()) == {"batchItemFailures": []}
    (manifest,) = pipeline.manifests().values()
    assert [e.key for e in manifest.entries] == ["incoming/app-1.json"]


def test_duplicate_notifications_in_a_batch_are_dropped(pipeline: Pipeline) -> None:
    pipeline.put("incoming/one.json")
    messages = pipeline.receive()
    # The same notification delivered twice (SQS is at-least-once), with another message id
    twin = dict(messages[-1], MessageId="twin-message")
    assert pipeline.invoke([*messages, twin]) == {"batchItemFailures": []}
    (manifest,) = pipeline.manifests().values()
    assert [e.key for e in manifest.entries] == ["incoming/one.json"]


def test_retried_invocation_rewrites_the_same_manifest(pipeline: Pipeline) -> None:
    for i in range(3):
        pipeline.put(f"incoming/{i}.json")
    messages = pipeline.receive()
    pipeline.invoke(messages)
    first = pipeline.manifests()
    pipeline.invoke(list(reversed(messages)))  # a retry; order within a batch is not guaranteed
    assert pipeline.manifests() == first


def test_bounds_split_into_several_manifests(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_MANIFEST_FILES", "2")
    monkeypatch.setenv("MAX_MANIFEST_BYTES", "250")
    handler._settings.cache_clear()
    for i in range(5):
        pipeline.put(f"incoming/{i}.json", b"x" * 100)
    assert pipeline.invoke(pipeline.receive()) == {"batchItemFailures": []}
    manifests = list(pipeline.manifests().values())
    assert sorted(m.file_count for m in manifests) == [1, 2, 2]
    assert all(m.total_bytes <= 250 for m in manifests)
    assert sorted(e.key for m in manifests for e in m.entries) == [f"incoming/{i}.json" for i in range(5)]


def test_unreadable_message_fails_alone(pipeline: Pipeline) -> None:
    pipeline.put("incoming/good.json")
    messages = pipeline.receive()
    event = lambda_sqs_event(messages, pipeline.queue_arn)
    event["Records"].append(sqs_record("not json at all", "bad-1"))
    event["Records"].append(sqs_record({"Records": [{"eventName": "ObjectCreated:Put"}]}, "bad-2"))

    response = handler.lambda_handler(event, FakeLambdaContext())

    assert response == {"batchItemFailures": [{"itemIdentifier": "bad-1"}, {"itemIdentifier": "bad-2"}]}
    (manifest,) = pipeline.manifests().values()
    assert [e.key for e in manifest.entries] == ["incoming/good.json"]


def test_failed_manifest_write_fails_only_its_messages(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_MANIFEST_FILES", "1")
    handler._settings.cache_clear()
    pipeline.put("incoming/a.json")
    pipeline.put("incoming/b.json")
    messages = pipeline.receive()

    from contracts.exceptions import StorageError
    from lambdas.manifest_builder.store import S3ObjectWriter

    real_put = S3ObjectWriter.put

    def flaky_put(self: S3ObjectWriter, bucket: str, key: str, body: bytes, *, content_type: str) -> None:
        if b"incoming/b.json" in body:
            raise StorageError("simulated S3 outage")
        real_put(self, bucket, key, body, content_type=content_type)

    monkeypatch.setattr(S3ObjectWriter, "put", flaky_put)
    response = pipeline.invoke(messages)

    key_of = {
        m["MessageId"]: unquote_plus(json.loads(m["Body"])["Records"][0]["s3"]["object"]["key"])
        for m in messages
        if "Records" in json.loads(m["Body"])
    }
    assert [key_of[item["itemIdentifier"]] for item in response["batchItemFailures"]] == ["incoming/b.json"]
    (manifest,) = pipeline.manifests().values()
    assert [e.key for e in manifest.entries] == ["incoming/a.json"]


def test_s3_test_event_is_skipped(pipeline: Pipeline) -> None:
    from tests.conftest import load_event

    event = {"Records": [sqs_record(load_event("s3_test_event.json"), "test-event")]}
    assert handler.lambda_handler(event, FakeLambdaContext()) == {"batchItemFailures": []}
    assert pipeline.manifests() == {}


def test_canonical_event_key_is_decoded(pipeline: Pipeline) -> None:
    from tests.conftest import load_event

    event = {"Records": [sqs_record(load_event("s3_object_created.json"), "m-1")]}
    assert handler.lambda_handler(event, FakeLambdaContext()) == {"batchItemFailures": []}
    (manifest,) = pipeline.manifests().values()
    assert manifest.entries[0].key == "incoming/2026/11/22/my file+1 ü 100%.json"
    assert manifest.entries[0].event_time.isoformat() == "2026-11-22T10:15:30.123000+00:00"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"size": 10**309}, "s3://landing-bucket/incoming/huge.json cannot be listed: size"),
        ({"size": 10_000 * 5 * 1024**3 + 1}, "cannot be listed: size"),
        ({"key": "incoming/" + "k" * 1100}, "cannot be listed: key"),
    ],
)
def test_an_event_no_s3_object_could_send_fails_its_message_alone_and_says_why(
    pipeline: Pipeline, change: dict[str, Any], reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a batch of a real event and a crafted one (a size past S3's largest object, 10,000 parts
    # of 5 GiB: 10**309 used to overflow the invocation's metrics and fail every message of the batch)
    from tests.conftest import load_event

    pipeline.put("incoming/good.json")
    event = lambda_sqs_event(pipeline.receive(), pipeline.queue_arn)
    crafted = load_event("s3_object_created.json")
    obj = crafted["Records"][0]["s3"]["object"]
    crafted["Records"][0]["s3"]["bucket"]["name"] = LANDING
    obj.update({"key": "incoming/huge.json", **change})
    event["Records"].append(sqs_record(crafted, "crafted"))
    caplog.clear()

    response = handler.lambda_handler(event, FakeLambdaContext())

    # Then only the crafted message fails, the log says which object and why, and the good one is listed
    assert response == {"batchItemFailures": [{"itemIdentifier": "crafted"}]}
    assert any(r.getMessage() == "message rejected" and reason in getattr(r, "reason", "") for r in caplog.records)
    (manifest,) = pipeline.manifests().values()
    assert [e.key for e in manifest.entries] == ["incoming/good.json"]
