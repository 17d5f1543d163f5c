"""The manifest Lambda's surge signal, through moto's EventBridge and the template's own rule:
S3 put -> SQS -> handler -> manifests + PutEvents -> the stack's rule -> its target."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from contracts.surge import DETAIL_TYPE, SOURCE, SurgeDetail
from infra.build import render
from lambdas.manifest_builder import handler
from lambdas.manifest_builder.service import BuildResult
from lambdas.manifest_builder.surge import SurgeSignal
from tests.lambdas.test_manifest_builder_moto import MANIFESTS, Pipeline


def _pattern(bucket: str) -> dict[str, Any]:
    """The template's ControlPlaneOnSurge pattern, its one Fn::Sub resolved for ``bucket``."""
    rule = render()["Resources"]["ControlPlaneOnSurge"]["Properties"]
    pattern = json.loads(json.dumps(rule["EventPattern"]))
    (uri,) = pattern["detail"]["manifest_uri"]
    pattern["detail"]["manifest_uri"] = [uri["Fn::Sub"].replace("${ManifestBucket}", bucket)]
    return dict(pattern)


class Targets:
    """The stack's rule and another stack's, each delivering to a queue."""

    def __init__(self) -> None:
        self.events = boto3.client("events", region_name="us-east-1")
        self.sqs = boto3.client("sqs", region_name="us-east-1")
        self.queues = {}
        for name, bucket in (("ours", MANIFESTS), ("theirs", "another-stacks-manifests")):
            url = self.sqs.create_queue(QueueName=f"surge-{name}")["QueueUrl"]
            arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            self.events.put_rule(Name=f"surge-{name}", EventPattern=json.dumps(_pattern(bucket)))
            self.events.put_targets(Rule=f"surge-{name}", Targets=[{"Id": "t", "Arn": arn}])
            self.queues[name] = url

    def received(self, name: str) -> list[dict[str, Any]]:
        got = self.sqs.receive_message(QueueUrl=self.queues[name], MaxNumberOfMessages=10).get("Messages", [])
        return [json.loads(m["Body"]) for m in got]


@pytest.fixture
def signalled(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Pipeline, Targets]]:
    monkeypatch.setenv("MANIFEST_BUCKET", MANIFESTS)
    monkeypatch.setenv("MANIFEST_PREFIX", "manifests")
    monkeypatch.setenv("SOURCE_PREFIX", "incoming/")
    for cached in (handler._settings, handler._writer, handler._signal):
        cached.cache_clear()
    yield Pipeline(), Targets()
    for cached in (handler._settings, handler._writer, handler._signal):
        cached.cache_clear()


def test_an_invocation_over_the_threshold_signals_the_stack_s_control_plane_once(
    signalled: tuple[Pipeline, Targets], monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline, targets = signalled
    monkeypatch.setenv("SURGE_BYTES", "20")
    # Given an invocation whose manifest references 3 x 8 bytes
    for i in range(3):
        pipeline.put(f"incoming/{i}.json", b'{"a":1}\n')
    assert pipeline.invoke(pipeline.receive()) == {"batchItemFailures": []}
    # Then the stack's rule delivered one signal naming the manifest prefix and the bytes written
    (event,) = targets.received("ours")
    assert (event["source"], event["detail-type"]) == (SOURCE, DETAIL_TYPE)
    (manifest,) = pipeline.manifests().values()
    assert SurgeDetail.model_validate(event["detail"]) == SurgeDetail(
        manifest_uri=f"s3://{MANIFESTS}/manifests/", bytes=24, manifests=1, oldest=manifest.earliest_event_time
    )
    # and another stack's rule (another manifest prefix) nothing
    assert targets.received("theirs") == []
    # When the next invocation of the same container follows within 30 s: no second signal
    for i in range(3, 6):
        pipeline.put(f"incoming/{i}.json", b'{"a":1}\n')
    assert pipeline.invoke(pipeline.receive()) == {"batchItemFailures": []}
    assert targets.received("ours") == []
    assert len(pipeline.manifests()) == 2  # the manifests were written either way


def test_no_signal_under_the_threshold_or_when_it_is_off(
    signalled: tuple[Pipeline, Targets], monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline, targets = signalled
    monkeypatch.setenv("SURGE_BYTES", "25")
    pipeline.put("incoming/a.json", b'{"a":1}\n')
    pipeline.invoke(pipeline.receive())
    assert targets.received("ours") == []
    monkeypatch.setenv("SURGE_BYTES", "0")  # the default: off
    for cached in (handler._settings, handler._signal):
        cached.cache_clear()
    pipeline.put("incoming/b.json", b"x" * 1000)
    pipeline.invoke(pipeline.receive())
    assert targets.received("ours") == []


class _Refusing:
    def __init__(self, error: bool) -> None:
        self.error, self.calls = error, 0

    def put_events(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        if self.error:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "PutEvents")
        return {"FailedEntryCount": 1, "Entries": [{"ErrorCode": "InternalFailure"}]}


@pytest.mark.parametrize("error", [True, False], ids=["raised", "entry refused"])
def test_a_signal_that_cannot_be_sent_never_fails_the_invocation_and_is_tried_again(error: bool) -> None:
    client = _Refusing(error)
    clock = iter([0.0, 1.0])
    signal = SurgeSignal(client, manifest_uri="s3://b/manifests/", threshold=1, clock=lambda: next(clock))
    result = BuildResult(response={}, manifests_written=["k"], bytes=5)
    assert signal.after(result) is False
    assert signal.after(result) is False  # not sent, so not held back by the 30 s interval
    assert client.calls == 2
