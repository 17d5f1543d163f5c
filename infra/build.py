"""Render the deployable template: base YAML + generated dashboard and metric alarms.

``python -m infra.build`` writes ``infra/build/template.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from contracts.object_filter import DEFAULT_SUFFIXES, ObjectFilter
from infra import parameters
from infra.observability import alarm_resources, dashboard_resource
from infra.runtime import (
    DEFAULT_GLUE_VERSION,
    NATIVE_WHEEL_URI,
    STREAMING_WORKER_TYPES,
    additional_python_modules,
    glue_runtimes,
)
from infra.wheelhouse import INSTALLER_OPTION

HERE = Path(__file__).parent
BASE = HERE / "template.yaml"
OUT = HERE / "build" / "template.json"


def tls_only_policies(resources: dict[str, Any]) -> dict[str, Any]:
    """A TLS-only bucket policy for every bucket that has no policy of its own in the base."""
    with_policy = {r["Properties"]["Bucket"]["Ref"] for r in resources.values() if r["Type"] == "AWS::S3::BucketPolicy"}
    out = {}
    for name, res in resources.items():
        if res["Type"] != "AWS::S3::Bucket" or name in with_policy:
            continue
        out[f"{name}Policy"] = {
            "Type": "AWS::S3::BucketPolicy",
            "Properties": {
                "Bucket": {"Ref": name},
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "TlsOnly",
                            "Effect": "Deny",
                            "Principal": "*",
                            "Action": "s3:*",
                            "Resource": [{"Fn::GetAtt": [name, "Arn"]}, {"Fn::Sub": "${" + name + ".Arn}/*"}],
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                        }
                    ],
                },
            },
        }
    return out


def apply_runtime(template: dict[str, Any]) -> None:
    """Glue versions, worker types and the job's extra modules, from their one definition."""
    params = template["Parameters"]
    params["GlueVersion"]["Default"] = DEFAULT_GLUE_VERSION
    params["GlueVersion"]["AllowedValues"] = sorted(glue_runtimes())
    params["WorkerType"]["AllowedValues"] = list(STREAMING_WORKER_TYPES)
    args = template["Resources"]["GlueJob"]["Properties"]["DefaultArguments"]
    args["--additional-python-modules"] = {"Fn::Sub": additional_python_modules(NATIVE_WHEEL_URI)}
    args["--python-modules-installer-option"] = INSTALLER_OPTION


def apply_object_filter(template: dict[str, Any]) -> None:
    """The landing bucket's notifications and the manifest Lambda's filter, from one definition
    (contracts.object_filter): one notification per suffix under the LandingPrefix parameter."""
    taken = ObjectFilter("incoming/", DEFAULT_SUFFIXES)  # the prefix value is the stack's parameter
    resources = template["Resources"]
    queue = {"Fn::GetAtt": ["LandingQueue", "Arn"]}
    configs: list[dict[str, Any]] = []
    for rendered in taken.s3_filter_rules():
        rules = [
            {"Name": "prefix", "Value": {"Ref": "LandingPrefix"}} if r["Name"] == "prefix" else r for r in rendered
        ]
        configs.append({"Event": "s3:ObjectCreated:*", "Queue": queue, "Filter": {"S3Key": {"Rules": rules}}})
        # deletions (never lifecycle expirations: s3:LifecycleExpiration:*) when a table retracts them
        removed: dict[str, Any] = {"Event": "s3:ObjectRemoved:*", "Queue": queue, "Filter": {"S3Key": {"Rules": rules}}}
        configs.append({"Fn::If": ["SubscribeDeletions", removed, {"Ref": "AWS::NoValue"}]})
    resources["LandingBucket"]["Properties"]["NotificationConfiguration"] = {
        "Fn::If": [
            "UseEventBridge",
            {"EventBridgeConfiguration": {"EventBridgeEnabled": True}},
            {"QueueConfigurations": configs},
        ]
    }
    pattern = resources["LandingObjectCreated"]["Properties"]["EventPattern"]["detail"]
    pattern["object"] = {"key": eventbridge_key_patterns(taken)}
    env = resources["ManifestLambda"]["Properties"]["Environment"]["Variables"]
    env["SOURCE_SUFFIXES"] = ",".join(DEFAULT_SUFFIXES)


def eventbridge_key_patterns(taken: ObjectFilter) -> list[dict[str, Any]]:
    """EventBridge key patterns (OR'ed) matching what ``taken`` admits, under the LandingPrefix
    parameter: ``wildcard`` <prefix>*<suffix> per suffix, or ``prefix`` for every key."""
    if taken.any_suffix:
        return [{"prefix": {"Ref": "LandingPrefix"}}]
    return [{"wildcard": {"Fn::Sub": "${LandingPrefix}*" + suffix}} for suffix in taken.suffixes]


def render() -> dict[str, Any]:
    template: dict[str, Any] = yaml.safe_load(BASE.read_text(encoding="utf-8"))
    apply_runtime(template)
    apply_object_filter(template)
    parameters.apply(template)  # after apply_runtime: the worker types it allows are narrowed, never widened
    resources = template["Resources"]
    generated = {"Dashboard": dashboard_resource(), **alarm_resources(), **tls_only_policies(resources)}
    clash = set(generated) & set(resources)
    if clash:
        raise ValueError(f"generated resources clash with the base template: {sorted(clash)}")
    resources.update(generated)
    return template


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(render(), indent=1) + "\n", encoding="utf-8")
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
