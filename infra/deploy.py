"""``make deploy`` / ``make plan`` / ``make destroy``: package, upload, show the change set and its
cost, create or update the stack, print outputs; or delete it, keeping the table's data.

Each says what it is about to do first, asks before it changes a stack or deletes data (``YES=1``
answers yes, for CI), and stops with a clear message when credentials or permissions are missing.
CloudFormation lives in :mod:`infra.stack`, the change set's review in :mod:`infra.plan`, the
concurrency check in :mod:`infra.concurrency`, a failed first create in :mod:`infra.recovery`,
emptying before a delete in :mod:`infra.teardown`, what a delete keeps in :mod:`infra.kept`.
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

from infra import concurrency, kept, parameters, plan, recovery, teardown
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
    kms: Any
    cloudwatch: Any
    dynamodb: Any = None

    @classmethod
    def of(cls, s: Any) -> Clients:
        return cls(
            cfn=s.client("cloudformation"),
            s3=s.client("s3"),
            lambda_=s.client("lambda"),
            glue=s.client("glue"),
            events=s.client("events"),
            kms=s.client("kms"),
            cloudwatch=s.client("cloudwatch"),
            dynamodb=s.client("dynamodb"),
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
    mode: plan.Mode = "ask",
) -> int:
    """Build, upload, show the change set and its cost, then apply it (``mode``: ``ask`` at the
    terminal, ``yes`` without asking, ``plan`` never)."""
    # a bad routing file stops here, before anything is built or uploaded
    routing = routes_artifact(routes, params) if routes is not None else None
    s = session(region)
    clients = Clients.of(s)
    account = s.client("sts").get_caller_identity()["Account"]
    bucket = deploy_bucket_name(stack, account, s.region_name)
    verb = "show the change set of" if mode == "plan" else "create or update"
    print(f"about to: build artifacts, upload them to s3://{bucket}/, and {verb} stack {stack!r}")
    ask = plan.terminal_prompt()
    # a plan deletes nothing: a failed first create is only reported, with the command that recovers
    existing = _ready_stack(
        clients,
        stack,
        replace_failed=replace_failed and mode != "plan",
        yes=mode == "yes",
        ask=ask if mode != "plan" else None,
        region=s.region_name,
    )
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
        params = {**params, "RoutesUri": f"s3://{bucket}/{key}", "RoutesRetract": retracts(routing)}
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
    output = kept.output_bucket_name(given["ProjectName"], account, s.region_name)
    outcome = apply(
        clients,
        stack=stack,
        template=template,
        template_url=url,
        given=given,
        existing=existing,
        mode=mode,
        ask=ask,
        output_bucket=output,
    )
    return 1 if outcome == "not applied" and mode == "ask" else 0


def retracts(routing: bytes) -> str:
    """RoutesRetract: "true" when a table of the routing file retracts deleted keys (the stack then
    subscribes to the landing bucket's deletions)."""
    from contracts.routing import parse_routing

    tables = parse_routing(routing).tables.values()
    return "true" if any(t.on_delete == "retract" for t in tables) else "false"


def routes_artifact(path: Path, params: dict[str, str]) -> bytes:
    """The routing file as the job reads it (canonical JSON), checked as the job checks it at start-up:
    the model, each table's columns and partitioning, names the database can take."""
    from contracts.exceptions import ConfigError
    from contracts.routing import parse_routing
    from glue_processor.plan.routes import resolve
    from glue_processor.settings import settings_from_mapping

    if not path.is_file():
        raise DeployError(f"ROUTES={path} is not a file")
    if params.get("SchemaUri") or params.get("PartitionBy") or params.get("ExpectUri"):
        raise DeployError(
            "ROUTES names each table's columns, partitioning and rules: leave SchemaUri, PartitionBy and ExpectUri"
        )
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
    mode: plan.Mode = "yes",
    ask: recovery.Ask | None = None,
    output_bucket: str = "",
) -> cfn_stack.Outcome:
    """Check, show the change set and its cost, create or update (as ``mode`` says), print the
    outputs, and restart the job if its code changed."""
    declared = template.get("Parameters", {})
    previous = cfn_stack.previous_values(existing)
    defaults = {k: v.get("Default") for k, v in declared.items()}
    values = cfn_stack.effective_values(defaults=defaults, previous=previous, given=given)
    parameters.check(template, values)
    concurrency.check(clients.lambda_, values, previous)
    if existing is None:
        left = [
            found
            for found in (
                teardown.catalog_left_behind(clients.glue, values.get("DatabaseName", "")),
                kept.bucket_left_behind(clients.s3, output_bucket) if output_bucket else None,
                kept.index_left_behind(clients.dynamodb, kept.index_table_name(stack))
                if clients.dynamodb is not None
                else None,
            )
            if found
        ]
        if left:
            verb = "exists" if len(left) == 1 else "exist"
            raise DeployError(
                f"{' and '.join(left)} {verb} already, kept by an earlier stack (the table's files, catalog and key "
                f"outlive the stack they came from). Remove them with make destroy STACK={stack} DROP_DATA=1 "
                "(this deletes the table's data), or deploy with another STACK and DatabaseName"
            )
    args = {
        "StackName": stack,
        "TemplateURL": template_url,
        "Parameters": cfn_stack.merge_parameters(declared=set(declared), previous=previous, given=given),
        "Capabilities": ["CAPABILITY_IAM"],
    }
    review = plan.reviewer(mode, template=template, values=values, stack=stack, ask=ask)
    outcome = cfn_stack.create_or_update(clients.cfn, args, exists=existing is not None, review=review)
    if outcome == "not applied" and mode != "plan":
        print(f"not applied: the change set was deleted; stack {stack} is as it was")
    if outcome in ("no changes", "not applied"):
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
    clients: Clients, stack: str, *, replace_failed: bool, yes: bool, ask: recovery.Ask | None, region: str = ""
) -> dict[str, Any] | None:
    """The existing stack if it can be updated, ``None`` if it must be created."""
    existing = cfn_stack.describe(clients.cfn, stack)
    if existing is None:
        return None
    status = existing["StackStatus"]
    if status == cfn_stack.NEVER_CREATED:
        return None
    if status in cfn_stack.FAILED_CREATES:
        recovery.replace_failed_create(
            clients, stack, status, replace_failed=replace_failed, yes=yes, ask=ask, region=region
        )
        return None
    if status not in cfn_stack.UPDATABLE:
        reasons = cfn_stack.failure_reasons(clients.cfn, stack) if status.endswith("FAILED") else []
        raise DeployError(
            "\n".join([f"stack {stack} is {status}; wait for it to settle, or fix it in the console", *reasons])
        )
    return existing


def destroy(
    stack: str,
    region: str | None,
    *,
    empty: bool,
    drop_data: bool = False,
    params: dict[str, str] | None = None,
    yes: bool = False,
) -> int:
    s = session(region)
    clients = Clients.of(s)
    account = s.client("sts").get_caller_identity()["Account"]
    params = params or {}
    extra = " after quieting it and emptying the buckets that go with it" if empty or drop_data else ""
    print(
        f"about to delete stack {stack!r}{extra}"
        + (", then the table's files, catalog and key" if drop_data else ", keeping the table's files, catalog and key")
    )
    output = kept.output_bucket_name(params.get("ProjectName", stack), account, s.region_name)
    return destroy_stack(
        clients,
        stack,
        empty=empty,
        drop_data=drop_data,
        params=params,
        output_bucket=output,
        yes=yes,
        ask=plan.terminal_prompt(),
    )


def destroy_stack(
    clients: Clients,
    stack: str,
    *,
    empty: bool,
    drop_data: bool = False,
    params: dict[str, str] | None = None,
    output_bucket: str = "",
    yes: bool = False,
    ask: recovery.Ask | None = None,
    wait_s: float = 900,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Delete the stack. The table's files (the output bucket), its catalog and the KMS key are kept
    (their DeletionPolicy), and said so with what they keep costing; with ``drop_data`` they are
    removed too, also when the stack is gone already. With ``empty`` (implied by ``drop_data``)
    the stack is first quieted and the buckets that go with it emptied. Deleting data is asked
    about first (``yes`` answers; with no terminal and no ``yes``, refused)."""
    params = params or {}
    existing = cfn_stack.describe(clients.cfn, stack)
    if existing is None:
        if not drop_data:
            raise StackNotFound(f"stack {stack} does not exist in this account and region; nothing to delete")
        database, table = _catalog_names(params, {})
        left = kept.left_by_a_destroyed_stack(
            clients.s3,
            output_bucket,
            database,
            [table, teardown.LOAD_HISTORY, teardown.QUARANTINE],
            dynamodb=clients.dynamodb,
            index=kept.index_table_name(stack),
        )
        _confirm_deletion(left.describe(), yes=yes, ask=ask)
        kept.drop(clients.s3, clients.glue, clients.kms, left, dynamodb=clients.dynamodb)
        print(f"removed what stack {stack} kept: the table's files, catalog, key index and key")
        return 0
    previous = cfn_stack.previous_values(existing)
    database, table = _catalog_names(params, previous)
    # the tables of the routing file the job wrote (read now: the deployment bucket holding it is kept)
    routed = teardown.routed_tables(clients.s3, previous.get("RoutesUri", "")) if drop_data else []
    resources = cfn_stack.physical_ids(clients.cfn, stack)
    keep = kept.of_stack(
        resources,
        database=database,
        tables=list(dict.fromkeys([table, teardown.LOAD_HISTORY, teardown.QUARANTINE, *routed])),
    )
    if empty or drop_data:
        emptied = [b for b in teardown.buckets_of(resources) if b != keep.bucket]
        doomed = [f"every object of s3://{b}" for b in emptied] + (keep.describe() if drop_data else [])
        _confirm_deletion(doomed, yes=yes, ask=ask)
        teardown.quiet(
            teardown.Clients(events=clients.events, lambda_=clients.lambda_, glue=clients.glue, s3=clients.s3),
            resources,
            wait_s=wait_s,
            sleep=sleep,
        )
        # the kept bucket's access logs went to a bucket that goes now
        teardown.stop_access_logs(clients.s3, [keep.bucket] if keep.bucket else [])
        teardown.empty_buckets(clients.s3, emptied)
    try:
        cfn_stack.delete(clients.cfn, stack)
    except DeployError as exc:
        if not (empty or drop_data):
            raise DeployError(f"{exc}\n(non-empty buckets? run make destroy EMPTY=1)") from exc
        # S3 delivers access logs late (best effort): logs of requests made before logging was
        # turned off can land in the log bucket after it was emptied. Empty what is left, once more.
        print(f"{exc}\nemptying the remaining buckets again and retrying the delete")
        remaining = [b for b in teardown.buckets_of(cfn_stack.physical_ids(clients.cfn, stack)) if b != keep.bucket]
        teardown.empty_buckets(clients.s3, remaining)
        cfn_stack.delete(clients.cfn, stack)
    if drop_data:
        kept.drop(clients.s3, clients.glue, clients.kms, keep, dynamodb=clients.dynamodb)
        print(
            f"stack {stack} deleted, and the table's files, catalog, key index and key; the deployment bucket is kept"
        )
        return 0
    print(f"stack {stack} deleted; the deployment bucket is kept")
    gigabytes, complete = kept.size_gb(clients.s3, clients.cloudwatch, keep.bucket) if keep.bucket else (0.0, True)
    index_gigabytes = kept.index_gb(clients.dynamodb, keep.index) if keep.index and clients.dynamodb else 0.0
    print(kept.report(keep, gigabytes, complete=complete, stack=stack, index_gigabytes=index_gigabytes))
    return 0


def _confirm_deletion(doomed: list[str], *, yes: bool, ask: recovery.Ask | None) -> None:
    """Say what is about to be deleted; go on only on ``yes`` or a yes at the terminal."""
    if not doomed:
        return
    print("about to delete (this deletes data):\n" + "\n".join(f"  {d}" for d in doomed))
    if yes:
        return
    if ask is None:
        raise DeployError("nothing deleted: no terminal to ask on; run again with YES=1 to delete the data above")
    if not ask("delete them? [y/N] "):
        raise DeployError("nothing deleted")


def _catalog_names(given: dict[str, str], previous: dict[str, str]) -> tuple[str, str]:
    """The Glue database and table of the stack: given, else the stack's, else the template's default."""
    defaults = render()["Parameters"]
    return tuple(  # type: ignore[return-value]
        given.get(k) or previous.get(k) or str(defaults.get(k, {}).get("Default", ""))
        for k in ("DatabaseName", "TableName")
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="deploy")
    p.add_argument("action", choices=["deploy", "plan", "destroy"])
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
        help="deploy: delete a stack a failed first create left (ROLLBACK_COMPLETE or ROLLBACK_FAILED, its "
        "buckets emptied), then create it again",
    )
    p.add_argument("--yes", action="store_true", help="apply the change set, or delete data, without asking (CI)")
    p.add_argument("--empty", action="store_true", help="destroy: quiet the stack and empty its buckets first")
    p.add_argument(
        "--drop-data",
        action="store_true",
        help="destroy: also remove what a destroy keeps: the output bucket (the table's files), the Glue "
        "database and tables, the KMS key (implies --empty)",
    )
    p.add_argument("--drop-catalog", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        params = dict(_param(item) for item in args.param)
        if args.drop_catalog:
            raise DeployError(
                "DROP_CATALOG=1 is now DROP_DATA=1: it removes the table's files, catalog and key together "
                "(a catalog dropped alone kept files nothing pointed at)"
            )
        if args.action in ("deploy", "plan"):
            mode: plan.Mode = "plan" if args.action == "plan" else "yes" if args.yes else "ask"
            return deploy(
                args.stack, args.region, params, replace_failed=args.replace_failed, routes=args.routes, mode=mode
            )
        return destroy(args.stack, args.region, empty=args.empty, drop_data=args.drop_data, params=params, yes=args.yes)
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
