"""``make deploy`` / ``make destroy``: package, upload, create or update the stack, print outputs.

Both say what they are about to do first, and stop with a clear message when credentials or
permissions are missing. CloudFormation lives in :mod:`infra.stack`, the concurrency check in
:mod:`infra.concurrency`, emptying before a delete in :mod:`infra.teardown`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from infra import concurrency, parameters, teardown
from infra import stack as cfn_stack
from infra.build import render
from infra.exceptions import DeployError, StackNotFound
from infra.package import ROOT, build, content_digest, content_key, wheelhouse

CONTROL_PLANE = "ControlPlane"
JOB = "GlueJob"


@dataclass(frozen=True)
class Clients:
    cfn: Any
    s3: Any
    lambda_: Any
    glue: Any
    events: Any

    @classmethod
    def of(cls, s: Any) -> Clients:
        return cls(
            cfn=s.client("cloudformation"),
            s3=s.client("s3"),
            lambda_=s.client("lambda"),
            glue=s.client("glue"),
            events=s.client("events"),
        )


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


def deploy(
    stack: str,
    region: str | None,
    params: dict[str, str],
    *,
    replace_failed: bool = False,
    routes: Path | None = None,
) -> int:
    # a bad routing file stops here, before anything is built or uploaded
    routing = routes_artifact(routes, params) if routes is not None else None
    s = session(region)
    clients = Clients.of(s)
    account = s.client("sts").get_caller_identity()["Account"]
    bucket = deploy_bucket_name(stack, account, s.region_name)
    print(f"about to: build artifacts, upload them to s3://{bucket}/, and create or update stack {stack!r}")
    existing = _ready_stack(clients.cfn, stack, replace_failed=replace_failed, confirm=_prompt())
    template = render()
    artifacts = build(ROOT / "dist")
    ensure_bucket(clients.s3, bucket, s.region_name)
    keys = {name: content_key(path) for name, path in artifacts.items()}
    for name, path in artifacts.items():
        print(f"  upload {path.name} -> s3://{bucket}/{keys[name]}")
        clients.s3.upload_file(str(path), bucket, keys[name])
    prefix, wheels = wheelhouse(ROOT / "dist")
    print(f"  upload {len(wheels)} locked wheels -> s3://{bucket}/{prefix}/")
    for path in wheels:
        clients.s3.upload_file(str(path), bucket, f"{prefix}/{path.name}")
    if routing is not None:
        key = f"routes/{content_digest(routing)}.json"
        print(f"  upload {routes} (validated, as JSON) -> s3://{bucket}/{key}")
        clients.s3.put_object(Bucket=bucket, Key=key, Body=routing, ContentType="application/json")
        params = {**params, "RoutesUri": f"s3://{bucket}/{key}"}
    given = {
        **params,
        "ProjectName": stack,
        "CodeBucket": bucket,
        "ManifestLambdaKey": keys["lambdas"],
        "ControlPlaneKey": keys["lambdas"],
        "JobScriptKey": keys["job_script"],
        "JobPackageKey": keys["job_package"],
        "JobNativeWheelKey": keys["job_native_wheel"],
        "JobWheelhousePrefix": prefix,
    }
    template_key = f"templates/{stack}.json"
    clients.s3.put_object(Bucket=bucket, Key=template_key, Body=json.dumps(template).encode())
    url = f"https://{bucket}.s3.{s.region_name}.amazonaws.com/{template_key}"
    apply(clients, stack=stack, template=template, template_url=url, given=given, existing=existing)
    return 0


def routes_artifact(path: Path, params: dict[str, str]) -> bytes:
    """The routing file as the job reads it (canonical JSON), checked as the job checks it at start-up:
    the model, each table's columns and partitioning, names the database can take."""
    from contracts.exceptions import ConfigError
    from contracts.routing import parse_routing
    from glue_processor.plan.routes import resolve
    from glue_processor.settings import settings_from_mapping

    if not path.is_file():
        raise DeployError(f"ROUTES={path} is not a file")
    if params.get("SchemaUri") or params.get("PartitionBy"):
        raise DeployError("ROUTES names each table's columns and partitioning: leave SchemaUri and PartitionBy")
    try:
        routing = parse_routing(path.read_bytes(), source=str(path))
        roots = {k: f"s3://check/{k}" for k in ("manifest_uri", "output_uri", "quarantine_uri", "checkpoint_uri")}
        resolve(settings_from_mapping(roots), routing, source=str(path))
    except ConfigError as exc:
        raise DeployError(str(exc)) from exc
    return routing.to_json()


def apply(
    clients: Clients,
    *,
    stack: str,
    template: dict[str, Any],
    template_url: str,
    given: dict[str, str],
    existing: dict[str, Any] | None,
) -> cfn_stack.Outcome:
    """Check, create or update, print the outputs, and restart the job if its code changed."""
    declared = template.get("Parameters", {})
    previous = cfn_stack.previous_values(existing)
    defaults = {k: v.get("Default") for k, v in declared.items()}
    values = cfn_stack.effective_values(defaults=defaults, previous=previous, given=given)
    parameters.check(template, values)
    concurrency.check(clients.lambda_, values, previous)
    if existing is None:
        left = teardown.catalog_left_behind(clients.glue, values.get("DatabaseName", ""))
        if left:
            raise DeployError(
                f"{left} exists already, kept by an earlier stack (the catalog outlives the stack it came from). "
                f"Remove it with make destroy STACK={stack} DROP_CATALOG=1 (the table's files stay in S3), or "
                "deploy with another DatabaseName"
            )
    args = {
        "StackName": stack,
        "TemplateURL": template_url,
        "Parameters": cfn_stack.merge_parameters(declared=set(declared), previous=previous, given=given),
        "Capabilities": ["CAPABILITY_IAM"],
    }
    outcome = cfn_stack.create_or_update(clients.cfn, args, exists=existing is not None)
    if outcome == "no changes":
        return outcome
    done = cfn_stack.describe(clients.cfn, stack) or {}
    for o in done.get("Outputs", []):
        print(f"{o['OutputKey']:24} {o['OutputValue']}")
    changed = [k for k in job_parameters(template) if previous.get(k) not in (None, values.get(k))]
    if outcome == "updated" and changed:
        restart_job(clients, stack, reason=", ".join(changed))
    return outcome


def job_parameters(template: dict[str, Any]) -> list[str]:
    """The stack parameters the Glue job's definition is made of (its code, arguments, workers). A
    run keeps the definition it started with, while the roles, alarms and control plane follow an
    update at once: a change of any (its code, a routing file it reads at start-up, its metrics'
    namespace, its query name) restarts the running job, or it would put metrics the role no longer
    allows, under names the alarms no longer watch, until its next restart."""
    declared = set(template.get("Parameters", {}))
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("Ref"), str):
                found.add(node["Ref"])
            sub = node.get("Fn::Sub")
            if sub is not None:
                text = sub if isinstance(sub, str) else sub[0]
                found.update(re.findall(r"\$\{([A-Za-z0-9]+)\}", text))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(template.get("Resources", {}).get(JOB, {}))
    return sorted(found & declared)


def restart_job(clients: Clients, stack: str, *, reason: str) -> None:
    """Ask the control plane for a graceful restart, so the running job picks up the new code."""
    try:
        function = clients.cfn.describe_stack_resource(StackName=stack, LogicalResourceId=CONTROL_PLANE)[
            "StackResourceDetail"
        ]["PhysicalResourceId"]
        print(f"job code changed ({reason}): asking {function} to restart the job")
        out = clients.lambda_.invoke(FunctionName=function, Payload=json.dumps({"command": "restart"}).encode())
    except (ClientError, BotoCoreError) as exc:
        raise DeployError(f"stack updated, but the restart through the control plane failed: {exc}") from exc
    body = out["Payload"].read().decode()
    if out.get("FunctionError"):
        raise DeployError(f"stack updated, but the control plane's restart failed: {body}")
    print(f"  control plane: {body}")


def _ready_stack(
    cfn: Any, stack: str, *, replace_failed: bool, confirm: Callable[[str], bool] | None
) -> dict[str, Any] | None:
    """The existing stack if it can be updated, ``None`` if it must be created."""
    existing = cfn_stack.describe(cfn, stack)
    if existing is None:
        return None
    status = existing["StackStatus"]
    if status == cfn_stack.NEVER_CREATED:
        return None
    if status == cfn_stack.FAILED_CREATE:
        cfn_stack.handle_failed_create(cfn, stack, replace_failed=replace_failed, confirm=confirm)
        return None
    if status not in cfn_stack.UPDATABLE:
        reasons = cfn_stack.failure_reasons(cfn, stack) if status.endswith("FAILED") else []
        raise DeployError(
            "\n".join([f"stack {stack} is {status}; wait for it to settle, or fix it in the console", *reasons])
        )
    return existing


def _prompt() -> Callable[[str], bool] | None:
    if not sys.stdin.isatty():
        return None
    return lambda question: input(question).strip().lower() in {"y", "yes"}


def destroy(
    stack: str, region: str | None, *, empty: bool, drop_catalog: bool = False, params: dict[str, str] | None = None
) -> int:
    clients = Clients.of(session(region))
    extra = " after quieting and emptying it" if empty else ""
    print(f"about to delete stack {stack!r}{extra}" + (", then its Glue database and tables" if drop_catalog else ""))
    return destroy_stack(clients, stack, empty=empty, drop_catalog=drop_catalog, params=params or {})


def destroy_stack(
    clients: Clients,
    stack: str,
    *,
    empty: bool,
    drop_catalog: bool = False,
    params: dict[str, str] | None = None,
    wait_s: float = 900,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Delete the stack; with ``empty``, first quiet it and empty its buckets; with ``drop_catalog``,
    then remove the Glue database and table the stack keeps (also when the stack is gone already)."""
    existing = cfn_stack.describe(clients.cfn, stack)
    if existing is None and drop_catalog:
        names = _catalog_names(params or {}, {})
        teardown.drop_catalog(clients.glue, *names)
        return 0
    if existing is None:
        raise StackNotFound(f"stack {stack} does not exist in this account and region; nothing to delete")
    previous = cfn_stack.previous_values(existing)
    names = _catalog_names(params or {}, previous) if drop_catalog else ("", "")
    # the tables of the routing file the job wrote (read now: the deployment bucket holding it is kept)
    routed = teardown.routed_tables(clients.s3, previous.get("RoutesUri", "")) if drop_catalog else []
    if empty:
        resources = cfn_stack.physical_ids(clients.cfn, stack)
        teardown.quiet(
            teardown.Clients(events=clients.events, lambda_=clients.lambda_, glue=clients.glue, s3=clients.s3),
            resources,
            wait_s=wait_s,
            sleep=sleep,
        )
        teardown.empty_buckets(clients.s3, teardown.buckets_of(resources))
    try:
        cfn_stack.delete(clients.cfn, stack)
    except DeployError as exc:
        if not empty:
            raise DeployError(f"{exc}\n(non-empty buckets? run make destroy EMPTY=1)") from exc
        # S3 delivers access logs late (best effort): logs of requests made before logging was
        # turned off can land in the log bucket after it was emptied. Empty what is left, once more.
        print(f"{exc}\nemptying the remaining buckets again and retrying the delete")
        teardown.empty_buckets(clients.s3, teardown.buckets_of(cfn_stack.physical_ids(clients.cfn, stack)))
        cfn_stack.delete(clients.cfn, stack)
    if drop_catalog:
        teardown.drop_catalog(clients.glue, *names, also=routed)
        print(f"stack {stack} deleted, and its Glue database and tables; the deployment bucket is kept")
    else:
        print(
            f"stack {stack} deleted; kept: the deployment bucket, and the Glue database and table "
            f"(make destroy STACK={stack} DROP_CATALOG=1 removes them)"
        )
    return 0


def _catalog_names(given: dict[str, str], previous: dict[str, str]) -> tuple[str, str]:
    """The Glue database and table of the stack: given, else the stack's, else the template's default."""
    defaults = render()["Parameters"]
    return tuple(  # type: ignore[return-value]
        given.get(k) or previous.get(k) or str(defaults[k]["Default"]) for k in ("DatabaseName", "TableName")
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="deploy")
    p.add_argument("action", choices=["deploy", "destroy"])
    p.add_argument("--stack", default="ndjson-ingest")
    p.add_argument("--region")
    p.add_argument("--param", action="append", default=[], help="Key=Value stack parameter (repeatable)")
    p.add_argument(
        "--routes",
        type=Path,
        help="deploy: a routing file (YAML or JSON): validated, uploaded as JSON, passed as RoutesUri",
    )
    p.add_argument(
        "--replace-failed",
        action="store_true",
        help="deploy: delete a stack left in ROLLBACK_COMPLETE by a failed first create, then create it again",
    )
    p.add_argument("--empty", action="store_true", help="destroy: quiet the stack and empty its buckets first")
    p.add_argument(
        "--drop-catalog",
        action="store_true",
        help="destroy: then delete the Glue table and database the stack keeps (its files stay in S3)",
    )
    args = p.parse_args(argv)
    try:
        params = dict(_param(item) for item in args.param)
        if args.action == "deploy":
            return deploy(args.stack, args.region, params, replace_failed=args.replace_failed, routes=args.routes)
        return destroy(args.stack, args.region, empty=args.empty, drop_catalog=args.drop_catalog, params=params)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _param(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise DeployError(f"--param {item!r}: expected Key=Value")
    return key, value


if __name__ == "__main__":
    sys.exit(main())
