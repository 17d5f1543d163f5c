"""``make deploy`` / ``make destroy``: package, upload, create or update the stack, print outputs.

Both say what they are about to do first, and stop with a clear message when credentials or
permissions are missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from infra.build import render
from infra.package import ROOT, build, content_key


class DeployError(Exception):
    """A deployment step failed; the message says which and why."""


def session(region: str | None) -> Any:
    try:
        s = boto3.Session(region_name=region)
        if not s.region_name:
            raise DeployError("no AWS region: pass REGION=... (make deploy REGION=eu-west-1) or set AWS_REGION")
        identity = s.client("sts").get_caller_identity()
    except (NoCredentialsError, NoRegionError) as exc:
        raise DeployError(f"no usable AWS credentials ({exc}); configure a profile or AWS_* variables") from exc
    except ClientError as exc:
        raise DeployError(f"AWS rejected the credentials: {exc}") from exc
    except BotoCoreError as exc:
        raise DeployError(f"cannot reach AWS: {exc}") from exc
    print(f"account {identity['Account']} as {identity['Arn']} in {s.region_name}")
    return s


def deploy_bucket_name(stack: str, account: str, region: str) -> str:
    return f"{stack}-deploy-{account}-{region}"[:63]


def ensure_bucket(s3: Any, name: str, region: str) -> None:
    try:
        s3.head_bucket(Bucket=name)
        return
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in {"404", "NoSuchBucket", "NotFound"}:
            raise DeployError(f"deployment bucket {name}: {exc}") from exc
    print(f"creating deployment bucket {name}")
    args: dict[str, Any] = {"Bucket": name}
    if region != "us-east-1":
        args["CreateBucketConfiguration"] = {"LocationConstraint": region}
    s3.create_bucket(**args)
    s3.put_public_access_block(
        Bucket=name,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    s3.put_bucket_encryption(
        Bucket=name,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )


def deploy(stack: str, region: str | None, params: dict[str, str]) -> int:
    s = session(region)
    account = s.client("sts").get_caller_identity()["Account"]
    bucket = deploy_bucket_name(stack, account, s.region_name)
    print(f"about to: build artifacts, upload them to s3://{bucket}/, and create or update stack {stack!r}")
    artifacts = build(ROOT / "dist")
    s3 = s.client("s3")
    ensure_bucket(s3, bucket, s.region_name)
    keys = {name: content_key(path) for name, path in artifacts.items()}
    for name, path in artifacts.items():
        print(f"  upload {path.name} -> s3://{bucket}/{keys[name]}")
        s3.upload_file(str(path), bucket, keys[name])
    parameters = {
        "ProjectName": stack,
        "CodeBucket": bucket,
        "ManifestLambdaKey": keys["lambdas"],
        "ControlPlaneKey": keys["lambdas"],
        "JobScriptKey": keys["job_script"],
        "JobPackageKey": keys["job_package"],
        **params,
    }
    template = json.dumps(render())
    template_key = f"templates/{stack}.json"
    s3.put_object(Bucket=bucket, Key=template_key, Body=template.encode())
    cfn = s.client("cloudformation")
    url = f"https://{bucket}.s3.{s.region_name}.amazonaws.com/{template_key}"
    args = {
        "StackName": stack,
        "TemplateURL": url,
        "Parameters": [{"ParameterKey": k, "ParameterValue": str(v)} for k, v in parameters.items()],
        "Capabilities": ["CAPABILITY_IAM"],
    }
    try:
        cfn.describe_stacks(StackName=stack)
        exists = True
    except ClientError:
        exists = False
    try:
        if exists:
            print(f"updating stack {stack}")
            try:
                cfn.update_stack(**args)
            except ClientError as exc:
                if "No updates are to be performed" not in str(exc):
                    raise
                print("no changes")
            cfn.get_waiter("stack_update_complete").wait(StackName=stack)
        else:
            print(f"creating stack {stack}")
            cfn.create_stack(**args, OnFailure="ROLLBACK")
            cfn.get_waiter("stack_create_complete").wait(StackName=stack)
    except ClientError as exc:
        raise DeployError(f"CloudFormation refused: {exc} (check the IAM permissions of this identity)") from exc
    except BotoCoreError as exc:
        raise DeployError(f"stack {stack} did not finish: {exc}; see its events in the console") from exc
    outputs = cfn.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
    for o in outputs:
        print(f"{o['OutputKey']:24} {o['OutputValue']}")
    return 0


def destroy(stack: str, region: str | None, *, empty: bool) -> int:
    s = session(region)
    cfn = s.client("cloudformation")
    print(f"about to delete stack {stack!r}" + (" after emptying its buckets" if empty else ""))
    if empty:
        s3 = s.resource("s3")
        for res in cfn.describe_stack_resources(StackName=stack)["StackResources"]:
            if res["ResourceType"] == "AWS::S3::Bucket":
                print(f"  emptying s3://{res['PhysicalResourceId']}")
                s3.Bucket(res["PhysicalResourceId"]).object_versions.delete()
    try:
        cfn.delete_stack(StackName=stack)
        cfn.get_waiter("stack_delete_complete").wait(StackName=stack)
    except (ClientError, BotoCoreError) as exc:
        raise DeployError(f"delete of {stack} failed: {exc} (non-empty buckets? run make destroy EMPTY=1)") from exc
    print(f"stack {stack} deleted; the deployment bucket is kept")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="deploy")
    p.add_argument("action", choices=["deploy", "destroy"])
    p.add_argument("--stack", default="ndjson-ingest")
    p.add_argument("--region")
    p.add_argument("--param", action="append", default=[], help="Key=Value stack parameter (repeatable)")
    p.add_argument("--empty", action="store_true", help="destroy: empty the stack's buckets first")
    args = p.parse_args(argv)
    try:
        if args.action == "deploy":
            params = dict(item.split("=", 1) for item in args.param)
            return deploy(args.stack, args.region, params)
        return destroy(args.stack, args.region, empty=args.empty)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
