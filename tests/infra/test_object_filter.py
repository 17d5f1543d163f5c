"""One filter, one truth: every key the stack's notification admits is taken by the Lambda."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import metrics as M
from infra.build import render
from lambdas.manifest_builder.metrics import result_datums
from lambdas.manifest_builder.service import BuildResult
from lambdas.manifest_builder.settings import load_settings

T = render()
PREFIX = T["Parameters"]["LandingPrefix"]["Default"]
KEYS = [
    "incoming/a.json",
    "incoming/x/y.ndjson",
    "incoming/z.jsonl",
    "incoming/a.json.gz",
    "incoming/firehose-1-2026-11-22-10-00-00-abc.gz",
    "incoming/app-1.json",
    "incoming/UPPER.JSON",
    "incoming/a.csv",
    "incoming/no-suffix",
    "incomingx/a.json",
    "other/a.json",
]


def s3_admits(config: dict[str, Any], key: str) -> bool:
    """What S3 does with a notification's key filter (prefix and suffix, compared as strings)."""
    rules = {r["Name"]: r["Value"] for r in config["Filter"]["S3Key"]["Rules"]}
    prefix = PREFIX if rules.get("prefix") == {"Ref": "LandingPrefix"} else rules.get("prefix", "")
    return key.startswith(prefix) and key.endswith(rules.get("suffix", ""))


@pytest.mark.parametrize("key", KEYS)
def test_every_key_the_notification_admits_is_taken_by_the_lambda(key: str) -> None:
    listed = T["Resources"]["LandingBucket"]["Properties"]["NotificationConfiguration"]["Fn::If"][2][
        "QueueConfigurations"
    ]
    configs = [c["Fn::If"][1] if "Fn::If" in c else c for c in listed]  # the deletions' have the same filters
    env = T["Resources"]["ManifestLambda"]["Properties"]["Environment"]["Variables"]
    lambda_settings = load_settings(manifest_bucket="bkt", source_prefix=PREFIX, source_suffixes=env["SOURCE_SUFFIXES"])
    admitted = any(s3_admits(c, key) for c in configs)
    assert admitted == lambda_settings.accepts(key), key


def eventbridge_admits(key: str) -> bool:
    """What the EventBridge rule's key patterns match (OR'ed; wildcard '*' matches any characters)."""
    patterns = T["Resources"]["LandingObjectCreated"]["Properties"]["EventPattern"]["detail"]["object"]["key"]
    for pattern in patterns:
        if "prefix" in pattern and key.startswith(PREFIX):
            return True
        if "wildcard" in pattern:
            text = pattern["wildcard"]["Fn::Sub"].replace("${LandingPrefix}", PREFIX)
            head, _, tail = text.partition("*")
            if key.startswith(head) and key.endswith(tail) and len(key) >= len(head) + len(tail):
                return True
    return False


@pytest.mark.parametrize("key", KEYS)
def test_every_key_the_eventbridge_rule_admits_is_taken_by_the_lambda(key: str) -> None:
    env = T["Resources"]["ManifestLambda"]["Properties"]["Environment"]["Variables"]
    lambda_settings = load_settings(manifest_bucket="bkt", source_prefix=PREFIX, source_suffixes=env["SOURCE_SUFFIXES"])
    assert eventbridge_admits(key) == lambda_settings.accepts(key), key


def test_ignored_objects_are_counted() -> None:
    datums = {d.name: d.value for d in result_datums(BuildResult(response={}, ignored_objects=3))}
    assert datums[M.OBJECTS_IGNORED.name] == 3
