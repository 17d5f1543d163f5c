"""Every way S3 events reach the queue, delivered by moto: S3 -> SQS, S3 -> SNS -> SQS (raw message
delivery off and on) and S3 -> EventBridge -> SQS all become manifests; test events are skipped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from contracts.manifest import Manifest
from lambdas.manifest_builder import handler
from tests.helpers import FakeLambdaContext, lambda_sqs_event

LANDING = "landing-bucket"
MANIFESTS = "manifest-bucket"
KEY = "incoming/a b+ü%.json"


def _queue(sqs: Any, name: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def _wire(delivery: str, *, deletions: bool = False) -> tuple[str, str]:
    """The landing bucket's events delivered to a queue the way ``delivery`` says (``deletions``:
    its ObjectRemoved events too, as the stack subscribes them when a table retracts)."""
    kinds = ["s3:ObjectCreated:*", *(["s3:ObjectRemoved:*"] if deletions else [])]
    s3, sqs = boto3.client("s3", region_name="us-east-1"), boto3.client("sqs", region_name="us-east-1")
    s3.create_bucket(Bucket=LANDING)
    s3.create_bucket(Bucket=MANIFESTS)
    url, arn = _queue(sqs, "landing-events")
    if delivery == "sqs":
        config: dict[str, Any] = {"QueueConfigurations": [{"QueueArn": arn, "Events": kinds}]}
    elif delivery in ("sns", "sns-raw"):
        sns = boto3.client("sns", region_name="us-east-1")
        topic = sns.create_topic(Name="landing")["TopicArn"]
        raw = {"RawMessageDelivery": "true"} if delivery == "sns-raw" else {}
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes=raw)
        config = {"TopicConfigurations": [{"TopicArn": topic, "Events": kinds}]}
    else:
        events = boto3.client("events", region_name="us-east-1")
        types = ["Object Created", *(["Object Deleted"] if deletions else [])]
        pattern = {"source": ["aws.s3"], "detail-type": types, "detail": {"bucket": {"name": [LANDING]}}}
        events.put_rule(Name="landing-objects", EventPattern=json.dumps(pattern))
        events.put_targets(Rule="landing-objects", Targets=[{"Id": "queue", "Arn": arn}])
        config = {"EventBridgeConfiguration": {}}
    s3.put_bucket_notification_configuration(Bucket=LANDING, NotificationConfiguration=config)
    return url, arn


@pytest.fixture
def env(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("MANIFEST_BUCKET", MANIFESTS)
    monkeypatch.setenv("SOURCE_PREFIX", "incoming/")
    handler._settings.cache_clear()
    handler._writer.cache_clear()
    yield
    handler._settings.cache_clear()
    handler._writer.cache_clear()


@pytest.mark.usefixtures("env")
@pytest.mark.parametrize("delivery", ["sqs", "sns", "sns-raw", "eventbridge"])
def test_every_delivery_path_becomes_a_manifest(delivery: str) -> None:
    # Given the landing bucket's events delivered through `delivery`, and an object with an odd key
    url, arn = _wire(delivery)
    s3, sqs = boto3.client("s3", region_name="us-east-1"), boto3.client("sqs", region_name="us-east-1")
    s3.put_object(Bucket=LANDING, Key=KEY, Body=b'{"a":1}\n')
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    # When the handler gets what the queue holds (test events included, where S3 sends them)
    response = handler.lambda_handler(lambda_sqs_event(messages, arn), FakeLambdaContext())
    # Then nothing failed and one manifest lists the object with its decoded key and eTag
    assert response == {"batchItemFailures": []}
    listed = s3.list_objects_v2(Bucket=MANIFESTS)["Contents"]
    (manifest,) = [Manifest.from_json(s3.get_object(Bucket=MANIFESTS, Key=o["Key"])["Body"].read()) for o in listed]
    (entry,) = manifest.entries
    head = s3.head_object(Bucket=LANDING, Key=KEY)
    assert (entry.bucket, entry.key, entry.etag, entry.size) == (LANDING, KEY, head["ETag"].strip('"'), 8)


@pytest.mark.usefixtures("env")
@pytest.mark.parametrize("delivery", ["sqs", "sns", "sns-raw", "eventbridge"])
def test_a_deletion_is_listed_as_removed_whatever_the_delivery_path(delivery: str) -> None:
    # Given the landing bucket's deletions delivered too (a table retracts them)
    url, arn = _wire(delivery, deletions=True)
    s3, sqs = boto3.client("s3", region_name="us-east-1"), boto3.client("sqs", region_name="us-east-1")
    s3.put_object(Bucket=LANDING, Key=KEY, Body=b'{"a":1}\n')
    s3.delete_object(Bucket=LANDING, Key=KEY)
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    # When the handler gets both events
    response = handler.lambda_handler(lambda_sqs_event(messages, arn), FakeLambdaContext())
    # Then the manifest lists the upload, then the deletion as a removed entry (nothing to read)
    assert response == {"batchItemFailures": []}
    listed = s3.list_objects_v2(Bucket=MANIFESTS)["Contents"]
    entries = [
        e
        for o in listed
        for e in Manifest.from_json(s3.get_object(Bucket=MANIFESTS, Key=o["Key"])["Body"].read()).entries
    ]
    assert sorted((e.key, e.event, e.size) for e in entries) == [(KEY, "created", 8), (KEY, "removed", 0)]
