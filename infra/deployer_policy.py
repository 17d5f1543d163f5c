"""The IAM policy a deployer needs: ``python -m infra.deployer_policy > docs/deployer-policy.json``.

Generated, so it cannot drift from what it grants for:

- every resource type the rendered template declares: the permissions CloudFormation's resource
  handlers need to create, read, update and delete it, as each type's registry schema lists them
  (``handlers.<action>.permissions``; CloudFormation CLI User Guide, "Resource type schema"), read
  from the schemas cfn-lint ships;
- every call ``make deploy`` / ``make plan`` / ``make destroy`` make themselves (:data:`TOOL_CALLS`,
  by operation; a test records the calls the lifecycle makes and finds each here).

Resources are ``*``: the names are the stack's, known only at deploy time. Narrow them to your
stack's prefix (``<ProjectName>-*``) if your account holds other stacks. The document is larger than
a customer managed policy may be (6,144 characters) and within what a role's inline policies may
hold (10,240; IAM User Guide, "IAM and AWS STS quotas"): attach it inline to the deployer's role.
"""

from __future__ import annotations

import json
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

import cfnlint  # type: ignore[import-untyped]

from infra.build import render

HANDLERS = ("create", "read", "update", "delete")
SCHEMAS = Path(cfnlint.__file__).parent / "data" / "schemas"

# Operations the deploy tool calls itself (service, operation) -> the IAM actions they need
# (Service Authorization Reference; an S3 operation's action is not always its name).
TOOL_CALLS: dict[tuple[str, str], tuple[str, ...]] = {
    ("sts", "GetCallerIdentity"): (),  # needs no permission
    ("s3", "HeadBucket"): ("s3:ListBucket",),
    ("s3", "CreateBucket"): ("s3:CreateBucket",),
    ("s3", "PutPublicAccessBlock"): ("s3:PutBucketPublicAccessBlock",),
    ("s3", "PutBucketEncryption"): ("s3:PutEncryptionConfiguration",),
    ("s3", "GetBucketEncryption"): ("s3:GetEncryptionConfiguration",),
    # CloudFormation reads the template from TemplateURL with the caller's permissions
    ("s3", "PutObject"): ("s3:PutObject", "s3:GetObject"),
    ("s3", "CreateMultipartUpload"): ("s3:PutObject",),
    ("s3", "UploadPart"): ("s3:PutObject",),
    ("s3", "CompleteMultipartUpload"): ("s3:PutObject",),
    ("s3", "GetObject"): ("s3:GetObject",),
    ("s3", "GetBucketLogging"): ("s3:GetBucketLogging",),
    ("s3", "PutBucketLogging"): ("s3:PutBucketLogging",),
    ("s3", "ListObjectVersions"): ("s3:ListBucketVersions",),
    ("s3", "DeleteObjects"): ("s3:DeleteObject", "s3:DeleteObjectVersion"),
    ("s3", "DeleteBucket"): ("s3:DeleteBucket",),
    ("cloudformation", "DescribeStacks"): ("cloudformation:DescribeStacks",),
    ("cloudformation", "DescribeStackEvents"): ("cloudformation:DescribeStackEvents",),
    ("cloudformation", "DescribeStackResource"): ("cloudformation:DescribeStackResource",),
    ("cloudformation", "ListStackResources"): ("cloudformation:ListStackResources",),
    ("cloudformation", "CreateChangeSet"): ("cloudformation:CreateChangeSet",),
    ("cloudformation", "DescribeChangeSet"): ("cloudformation:DescribeChangeSet",),
    ("cloudformation", "DeleteChangeSet"): ("cloudformation:DeleteChangeSet",),
    ("cloudformation", "ExecuteChangeSet"): ("cloudformation:ExecuteChangeSet",),
    ("cloudformation", "SetStackPolicy"): ("cloudformation:SetStackPolicy",),
    ("cloudformation", "DeleteStack"): ("cloudformation:DeleteStack",),
    ("lambda", "GetAccountSettings"): ("lambda:GetAccountSettings",),
    ("lambda", "Invoke"): ("lambda:InvokeFunction",),
    ("lambda", "UpdateEventSourceMapping"): ("lambda:UpdateEventSourceMapping",),
    ("glue", "GetDatabase"): ("glue:GetDatabase",),
    ("glue", "GetJobRuns"): ("glue:GetJobRuns",),
    ("glue", "BatchStopJobRun"): ("glue:BatchStopJobRun",),
    ("glue", "DeleteTable"): ("glue:DeleteTable",),
    ("glue", "GetTables"): ("glue:GetTables",),
    ("glue", "DeleteDatabase"): ("glue:DeleteDatabase",),
    ("events", "DisableRule"): ("events:DisableRule",),
    ("kms", "DescribeKey"): ("kms:DescribeKey",),
    ("kms", "ScheduleKeyDeletion"): ("kms:ScheduleKeyDeletion",),
    ("cloudwatch", "GetMetricStatistics"): ("cloudwatch:GetMetricStatistics",),
    ("dynamodb", "DescribeTable"): ("dynamodb:DescribeTable",),
    ("dynamodb", "DeleteTable"): ("dynamodb:DeleteTable",),
}


@cache
def _index() -> dict[str, str]:
    return dict(json.loads((SCHEMAS / "providers" / "us-east-1.json").read_text(encoding="utf-8")))


def handler_permissions(resource_type: str) -> list[str]:
    """The IAM actions CloudFormation needs to create, read, update and delete ``resource_type``."""
    schema = json.loads((SCHEMAS / "resources" / f"{_index()[resource_type]}.json").read_text(encoding="utf-8"))
    handlers = schema.get("handlers", {})
    return sorted({p for h in HANDLERS for p in handlers.get(h, {}).get("permissions", [])})


def policy(template: dict[str, Any]) -> dict[str, Any]:
    """The deployer's policy document for ``template``: one statement per service, its actions sorted."""
    types = {res["Type"] for res in template["Resources"].values()}
    actions = {a for kind in types for a in handler_permissions(kind)}
    actions |= {a for needed in TOOL_CALLS.values() for a in needed}
    by_service: dict[str, list[str]] = {}
    for action in sorted(actions):
        by_service.setdefault(action.split(":", 1)[0], []).append(action)
    statements = [
        {"Sid": re.sub(r"[^A-Za-z0-9]", "", service.title()), "Effect": "Allow", "Action": names, "Resource": "*"}
        for service, names in sorted(by_service.items())
    ]
    return {"Version": "2012-10-17", "Statement": statements}


def main() -> int:
    sys.stdout.write(json.dumps(policy(render()), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
