"""``make deploy`` / ``make destroy`` against moto (S3, STS, Glue, EventBridge, Lambda, SQS) and
Stubber-scripted CloudFormation answers moto cannot give (ROLLBACK_COMPLETE, "No updates are to be
performed", describe errors). The tests drive ``infra.deploy.main`` with a fake session, so they run
the same path ``make deploy`` runs; nothing reaches AWS (fake credentials from the ``aws`` fixture).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from infra import concurrency, deploy, teardown
from infra.build import render
from infra.exceptions import DeployError
from infra.package import content_key

STACK = "ingest"
REGION = "us-east-1"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
TEMPLATE: dict[str, Any] = {
    "Parameters": {
        name: {"Type": "String", "Default": default}
        for name, default in {
            "ProjectName": "ndjson-ingest",
            "CodeBucket": "",
            "ManifestLambdaKey": "",
            "ControlPlaneKey": "",
            "JobScriptKey": "",
            "JobPackageKey": "",
            "JobNativeWheelKey": "",
            "JobWheelhousePrefix": "",
            "MaxWorkers": "10",
            "AlarmEmail": "",
            "ManifestLambdaReservedConcurrency": "0",
            "ControlPlaneReservedConcurrency": "0",
            "ManifestLambdaMaxConcurrency": "5",
            "MetricsNamespace": "NdjsonIngest",
            "TriggerIntervalSeconds": "30",
        }.items()
    },
    # the job as the stack defines it: which parameters it is made of decides a restart
    "Resources": {"GlueJob": render()["Resources"]["GlueJob"]},
}
ACCOUNT = {"AccountLimit": {"ConcurrentExecutions": 1000, "UnreservedConcurrentExecutions": 1000}}


class FakeSession:
    """What ``infra.deploy.session`` returns: a region and clients; here moto or stubbed ones."""

    region_name = REGION

    def __init__(self, clients: dict[str, Any]) -> None:
        self.clients = clients

    def client(self, name: str, **_: Any) -> Any:
        return self.clients[name]

    def resource(self, name: str, **_: Any) -> Any:  # the pre-issue-11 destroy used s3 resources
        factory: Any = boto3.resource
        return factory(name, region_name=REGION)


class World:
    def __init__(self, tmp: Path) -> None:
        self.cfn = boto3.client("cloudformation", region_name=REGION)
        self.lambda_ = boto3.client("lambda", region_name=REGION)
        self.cfn_stub = Stubber(self.cfn)
        self.lambda_stub = Stubber(self.lambda_)
        self.calls: list[str] = []
        self.requests: dict[str, dict[str, Any]] = {}
        self.deleted: list[tuple[str, int]] = []  # DeleteObjects: bucket, keys
        self.moto_lambda = boto3.client("lambda", region_name=REGION)
        self.clients = {
            "sts": boto3.client("sts", region_name=REGION),
            "s3": boto3.client("s3", region_name=REGION),
            "cloudformation": self.cfn,
            "lambda": self.lambda_,
            "glue": boto3.client("glue", region_name=REGION),
            "events": boto3.client("events", region_name=REGION),
            "kms": boto3.client("kms", region_name=REGION),
            "cloudwatch": boto3.client("cloudwatch", region_name=REGION),
            "dynamodb": boto3.client("dynamodb", region_name=REGION),
        }
        for client in self.clients.values():
            client.meta.events.register("provide-client-params.*.*", self._record)
        self.artifacts = {}
        for name in ("lambdas", "job_script", "job_package"):
            path = tmp / f"{name}.zip"
            path.write_bytes(name.encode())
            self.artifacts[name] = path
        wheel = tmp / "ndjson_arrow-0.1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
        wheel.write_bytes(b"wheel")
        self.artifacts["job_native_wheel"] = wheel
        self.keys = {name: content_key(path) for name, path in self.artifacts.items()}
        self.wheels = [tmp / "pyiceberg-0.12.0-cp311-cp311-manylinux2014_x86_64.whl"]
        self.wheels[0].write_bytes(b"locked wheel")
        self.wheelhouse_prefix = "wheelhouse/0123456789abcdef"

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append(model.name)
        if model.name == "DeleteObjects":
            self.deleted.append((params["Bucket"], len(params["Delete"]["Objects"])))
        self.requests[model.name] = dict(params)

    def stack(self, status: str, parameters: dict[str, str] | None = None) -> dict[str, Any]:
        params = [{"ParameterKey": k, "ParameterValue": v} for k, v in (parameters or {}).items()]
        return {
            "Stacks": [
                {"StackName": STACK, "StackStatus": status, "CreationTime": NOW, "Parameters": params, "Outputs": []}
            ]
        }

    def previous(self, **overrides: str) -> dict[str, str]:
        """The parameters a stack deployed from this very build has."""
        return {
            "ProjectName": STACK,
            "CodeBucket": deploy.deploy_bucket_name(STACK, "123456789012", REGION),
            "ManifestLambdaKey": self.keys["lambdas"],
            "ControlPlaneKey": self.keys["lambdas"],
            "JobScriptKey": self.keys["job_script"],
            "JobPackageKey": self.keys["job_package"],
            "JobNativeWheelKey": self.keys["job_native_wheel"],
            "JobWheelhousePrefix": self.wheelhouse_prefix,
            **overrides,
        }


@pytest.fixture
def world(aws: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    w = World(tmp_path)
    monkeypatch.setattr(deploy, "session", lambda region: FakeSession(w.clients))
    monkeypatch.setattr(deploy, "build", lambda out: w.artifacts)
    monkeypatch.setattr(deploy, "wheelhouse", lambda out: (w.wheelhouse_prefix, w.wheels))
    monkeypatch.setattr(deploy, "render", lambda: TEMPLATE)
    monkeypatch.setattr("sys.stdin", io.StringIO())  # not a TTY: never prompts
    with w.cfn_stub, w.lambda_stub:
        yield w


def change_set(
    world: World, *, changes: list[dict[str, Any]] | None = None, executes: bool = True, kind: str = "UPDATE"
) -> None:
    """What CloudFormation answers to a change set: created, computed (with ``changes``; none: it
    fails saying so, and is deleted, and an existing stack's policy is set again), then, if it runs,
    for an UPDATE the stack policy and the execution, for a CREATE the execution only (the policy
    follows the waiter: :func:`created`)."""
    world.cfn_stub.add_response("create_change_set", {"Id": "cs-id", "StackId": "id"}, None)
    if changes is None:
        world.cfn_stub.add_response(
            "describe_change_set",
            {
                "Status": "FAILED",
                "ExecutionStatus": "UNAVAILABLE",
                "StatusReason": "The submitted information didn't contain changes.",
                "Changes": [],
            },
            None,
        )
        world.cfn_stub.add_response("delete_change_set", {}, None)
        world.cfn_stub.add_response("set_stack_policy", {}, None)
        return
    world.cfn_stub.add_response(
        "describe_change_set", {"Status": "CREATE_COMPLETE", "ExecutionStatus": "AVAILABLE", "Changes": changes}, None
    )
    if executes and kind == "UPDATE":
        world.cfn_stub.add_response("set_stack_policy", {}, None)
    if executes:
        world.cfn_stub.add_response("execute_change_set", {}, None)
    else:
        world.cfn_stub.add_response("delete_change_set", {}, None)


def modify(logical: str, kind: str = "AWS::Lambda::Function", action: str = "Modify") -> dict[str, Any]:
    return {
        "Type": "Resource",
        "ResourceChange": {"Action": action, "LogicalResourceId": logical, "ResourceType": kind},
    }


def not_found(stub: Stubber, method: str = "describe_stacks") -> None:
    stub.add_client_error(
        method, "ValidationError", f"Stack with id {STACK} does not exist", 400, expected_params={"StackName": STACK}
    )


def failed_events() -> dict[str, Any]:
    def event(logical: str, status: str, reason: str, kind: str = "AWS::Lambda::Function") -> dict[str, Any]:
        return {
            "StackId": "id",
            "EventId": logical + status,
            "StackName": STACK,
            "LogicalResourceId": logical,
            "ResourceType": kind,
            "ResourceStatus": status,
            "ResourceStatusReason": reason,
            "Timestamp": NOW,
        }

    # newest first, as CloudFormation lists them
    return {
        "StackEvents": [
            event(STACK, "ROLLBACK_COMPLETE", "", "AWS::CloudFormation::Stack"),
            event("LandingQueue", "CREATE_FAILED", "Resource creation cancelled", "AWS::SQS::Queue"),
            event(
                "ControlPlane",
                "CREATE_FAILED",
                "The provided execution role does not have permissions to call SendMessage on SQS",
            ),
            event("ControlPlane", "CREATE_IN_PROGRESS", ""),
        ]
    }


def run(*argv: str) -> int:
    return deploy.main([*argv, "--stack", STACK, "--region", REGION])


# -- deploy -------------------------------------------------------------------------------------


def test_rollback_complete_is_reported_with_its_reasons_not_as_iam(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stack left in ROLLBACK_COMPLETE by a failed first create
    world.cfn_stub.add_response("describe_stacks", world.stack("ROLLBACK_COMPLETE"), {"StackName": STACK})
    world.cfn_stub.add_response("describe_stack_events", failed_events(), {"StackName": STACK})
    # When make deploy runs without --replace-failed (and stdin is no TTY)
    code = run("deploy")
    # Then it says so, with the first failure first, offers the flag, and touches nothing
    out, err = capsys.readouterr()
    assert code == 2
    assert "is in ROLLBACK_COMPLETE" in out
    assert out.index("ControlPlane (AWS::Lambda::Function): The provided execution role") < out.index("LandingQueue")
    assert "REPLACE_FAILED=1" in err and "IAM" not in err
    assert "DeleteStack" not in world.calls and "CreateChangeSet" not in world.calls
    world.cfn_stub.assert_no_pending_responses()


def test_replace_failed_deletes_the_rolled_back_stack_then_creates_it(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world.cfn_stub.add_response("describe_stacks", world.stack("ROLLBACK_COMPLETE"), {"StackName": STACK})
    world.cfn_stub.add_response("describe_stack_events", failed_events(), {"StackName": STACK})
    world.cfn_stub.add_response("list_stack_resources", {"StackResourceSummaries": []}, {"StackName": STACK})
    world.cfn_stub.add_response("delete_stack", {}, {"StackName": STACK})
    not_found(world.cfn_stub)  # the delete waiter: gone
    world.lambda_stub.add_response("get_account_settings", ACCOUNT, {})
    change_set(world, changes=[modify("ControlPlane", action="Add")], kind="CREATE")
    world.cfn_stub.add_response("describe_stacks", world.stack("CREATE_COMPLETE"), {"StackName": STACK})
    world.cfn_stub.add_response("set_stack_policy", {}, None)
    world.cfn_stub.add_response("describe_stacks", world.stack("CREATE_COMPLETE"), {"StackName": STACK})

    assert run("deploy", "--replace-failed", "--yes") == 0

    assert world.calls.index("DeleteStack") < world.calls.index("CreateChangeSet")
    assert world.requests["CreateChangeSet"]["ChangeSetType"] == "CREATE"
    # the policy of a new stack is set once it exists: CloudFormation refuses SetStackPolicy on a
    # stack in REVIEW_IN_PROGRESS (envato/stack_master#178, guardian/riff-raff#624)
    assert world.calls.index("ExecuteChangeSet") < world.calls.index("SetStackPolicy")
    world.cfn_stub.assert_no_pending_responses()


def test_a_no_op_update_says_no_changes_and_does_not_wait(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a stack deployed from this very build
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", world.previous()), None)
    world.lambda_stub.add_response("get_account_settings", ACCOUNT, {})
    change_set(world, changes=None)  # the change set says it has none (failed, with an empty change list)
    # When make deploy runs again
    code = run("deploy")
    # Then it prints "no changes" and returns: nothing is executed, no waiter polls describe_stacks
    # (the Stubber would reject any call beyond the ones scripted above); the stack policy is set
    # again (a create whose SetStackPolicy failed gets it on the next run)
    assert code == 0 and "no changes" in capsys.readouterr().out
    assert world.calls.count("DescribeStacks") == 1 and "ExecuteChangeSet" not in world.calls
    world.cfn_stub.assert_no_pending_responses()


def test_a_change_set_that_failed_for_another_reason_is_never_no_changes(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    # A change set that failed with an empty change list is "no changes" only when CloudFormation says
    # so (StatusReason "The submitted information didn't contain changes", as `aws cloudformation
    # deploy` matches): a failure of another kind printed "no changes" and exited 0
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", world.previous()), None)
    world.lambda_stub.add_response("get_account_settings", ACCOUNT, {})
    world.cfn_stub.add_response("create_change_set", {"Id": "cs-id", "StackId": "id"}, None)
    reason = "Parameter 'MaxWorkers' must be one of AllowedValues"
    failed = {"Status": "FAILED", "ExecutionStatus": "UNAVAILABLE", "StatusReason": reason, "Changes": []}
    world.cfn_stub.add_response("describe_change_set", failed, None)
    assert run("deploy") == 2
    out, err = capsys.readouterr()
    assert "no changes" not in out and reason in err


def test_an_update_that_would_change_the_table_is_refused_before_it_runs(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    # CloudFormation updates an AWS::Glue::Table by calling UpdateTable with the template's TableInput
    # only, dropping table_type=ICEBERG, metadata_location and the job's columns
    # (aws-cloudformation/cloudformation-coverage-roadmap#1919, #2495): such a change set never runs
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", world.previous()), None)
    world.lambda_stub.add_response("get_account_settings", ACCOUNT, {})
    change_set(
        world, changes=[modify("GlueJob", "AWS::Glue::Job"), modify("IcebergTable", "AWS::Glue::Table")], executes=False
    )
    assert run("deploy", "--param", "TableName=renamed") == 2
    err = capsys.readouterr().err
    assert "IcebergTable: Modify" in err and "never updated by CloudFormation" in err
    assert "ExecuteChangeSet" not in world.calls and "DeleteChangeSet" in world.calls
    world.cfn_stub.assert_no_pending_responses()


def test_every_executed_change_set_runs_under_the_stack_policy_that_protects_the_catalog(world: World) -> None:
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", world.previous()), None)
    world.lambda_stub.add_response("get_account_settings", ACCOUNT, {})
    change_set(world, changes=[modify("GlueJob", "AWS::Glue::Job")])
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", world.previous()), None)
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", world.previous()), None)
    assert run("deploy", "--yes") == 0
    # Then the stack policy (set before the execution) denies every update action on the database and
    # the tables, even to someone who executes a change set by hand (CloudFormation User Guide,
    # "Prevent updates to stack resources")
    assert world.calls.index("SetStackPolicy") < world.calls.index("ExecuteChangeSet")
    policy = json.loads(world.requests["SetStackPolicy"]["StackPolicyBody"])
    (deny,) = [st for st in policy["Statement"] if st["Effect"] == "Deny"]
    assert deny["Action"] == "Update:*"
    assert set(deny["Resource"]) == {f"LogicalResourceId/{r}" for r in ("GlueDatabase", "IcebergTable", "HiveTable")}


def test_a_new_stack_over_a_catalog_an_earlier_stack_kept_says_how_to_remove_it(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the database an earlier (destroyed) stack kept: DeletionPolicy RetainExceptOnCreate
    world.clients["glue"].create_database(DatabaseInput={"Name": "ndjson_ingest"})
    TEMPLATE["Parameters"]["DatabaseName"] = {"Type": "String", "Default": "ndjson_ingest"}
    try:
        not_found(world.cfn_stub)
        world.lambda_stub.add_response("get_account_settings", ACCOUNT, {})
        assert run("deploy") == 2
    finally:
        del TEMPLATE["Parameters"]["DatabaseName"]
    err = capsys.readouterr().err
    assert "Glue database ndjson_ingest exists already" in err and "DROP_DATA=1" in err
    assert "CreateChangeSet" not in world.calls


def test_destroy_drop_data_removes_what_a_destroyed_stack_kept_and_asks_first(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given what an earlier make destroy kept: the output bucket (encrypted with the stack's key, whose
    # alias went with the stack), the Glue database with the table and the job's load history
    s3, glue, kms = world.clients["s3"], world.clients["glue"], world.clients["kms"]
    key = kms.create_key()["KeyMetadata"]
    bucket = f"{STACK}-output-123456789012-{REGION}"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key["Arn"]}}]
        },
    )
    s3.put_object(Bucket=bucket, Key="data/events/data/part-0.parquet", Body=b"x")
    glue.create_database(DatabaseInput={"Name": "db"})
    glue.create_table(DatabaseName="db", TableInput={"Name": "events"})
    glue.create_table(DatabaseName="db", TableInput={"Name": "load_history"})  # the job created it
    monkeypatch.setattr(
        deploy,
        "render",
        lambda: {"Parameters": {"DatabaseName": {"Default": "db"}, "TableName": {"Default": "events"}}},
    )
    # When make destroy DROP_DATA=1 runs with no terminal and no YES=1, Then it deletes nothing
    not_found(world.cfn_stub)  # the stack is gone already
    assert run("destroy", "--drop-data") == 2
    assert "YES=1" in capsys.readouterr().err
    assert glue.get_databases()["DatabaseList"] and s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 1
    # When it runs with YES=1, Then the catalog, the files and the bucket, and the key go together
    not_found(world.cfn_stub)
    assert run("destroy", "--drop-data", "--yes") == 0
    assert glue.get_databases()["DatabaseList"] == []
    assert bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert kms.describe_key(KeyId=key["KeyId"])["KeyMetadata"]["KeyState"] == "PendingDeletion"


def test_drop_catalog_is_now_drop_data(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    # a catalog dropped alone left the table's files with nothing pointing at them (issue 42, item 7)
    assert run("destroy", "--drop-catalog") == 2
    assert "DROP_DATA=1" in capsys.readouterr().err and "DeleteTable" not in world.calls


def test_parameters_not_given_keep_their_previous_values(world: World) -> None:
    # Given a stack deployed once with an alarm e-mail and 8 max workers, and a parameter the
    # template no longer declares
    previous = world.previous(AlarmEmail="ops@example.com", MaxWorkers="8", Retired="x")
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", previous), None)
    world.lambda_stub.add_response("get_account_settings", ACCOUNT, {})
    change_set(world, changes=[modify("ManifestEventSource", "AWS::Lambda::EventSourceMapping")])
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", previous), None)
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", previous), None)
    # When make deploy runs with one new parameter only
    assert run("deploy", "--yes", "--param", "ManifestLambdaMaxConcurrency=10") == 0
    # Then the update keeps AlarmEmail and MaxWorkers, sets the given and the artifact keys, and
    # does not pass what the template no longer declares
    assert world.requests["CreateChangeSet"]["ChangeSetType"] == "UPDATE"
    sent = {p["ParameterKey"]: p for p in world.requests["CreateChangeSet"]["Parameters"]}
    assert sent["AlarmEmail"] == {"ParameterKey": "AlarmEmail", "UsePreviousValue": True}
    assert sent["MaxWorkers"] == {"ParameterKey": "MaxWorkers", "UsePreviousValue": True}
    assert sent["ManifestLambdaMaxConcurrency"]["ParameterValue"] == "10"
    assert sent["JobScriptKey"]["ParameterValue"] == world.keys["job_script"]
    assert "Retired" not in sent
    # And, the job's code being the same, no restart is asked for
    assert "Invoke" not in world.calls


def test_a_describe_error_is_reported_as_itself_not_as_no_stack(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world.cfn_stub.add_client_error(
        "describe_stacks", "AccessDenied", "User is not authorized to perform: cloudformation:DescribeStacks", 403
    )
    assert run("deploy") == 2
    err = capsys.readouterr().err
    assert "AccessDenied" in err and "not authorized" in err
    assert "CreateChangeSet" not in world.calls


@pytest.mark.parametrize(
    ("changed", "old_key", "argv"),
    [
        ("JobPackageKey", "artifacts/job_package-0000.zip", ()),
        ("JobNativeWheelKey", "artifacts/0000/ndjson_arrow-0.1.0-cp311-cp311-manylinux_2_17_x86_64.whl", ()),
        # the job's definition, not its code: a run keeps the arguments it started with, while the role's
        # metrics condition and the alarms follow the new namespace at once (infra probe's MEDIUM 2)
        ("MetricsNamespace", "OldNamespace", ("--param", "MetricsNamespace=NewNamespace")),
        ("TriggerIntervalSeconds", "30", ("--param", "TriggerIntervalSeconds=60")),
    ],
)
def test_a_code_update_restarts_the_job_through_the_control_plane(
    world: World, capsys: pytest.CaptureFixture[str], changed: str, old_key: str, argv: tuple[str, ...]
) -> None:
    # Given a stack whose job runs an older build (its Python package, or its native parser), or an
    # older definition
    previous = world.previous(**{changed: old_key})
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", previous), None)
    world.lambda_stub.add_response("get_account_settings", ACCOUNT, {})
    change_set(world, changes=[modify("GlueJob", "AWS::Glue::Job")])
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", previous), None)
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE", previous), None)
    world.cfn_stub.add_response(
        "describe_stack_resource",
        {
            "StackResourceDetail": {
                "LogicalResourceId": "ControlPlane",
                "PhysicalResourceId": "ingest-control-plane",
                "ResourceType": "AWS::Lambda::Function",
                "LastUpdatedTimestamp": NOW,
                "ResourceStatus": "UPDATE_COMPLETE",
            }
        },
        {"StackName": STACK, "LogicalResourceId": "ControlPlane"},
    )
    body = json.dumps({"command": "restart", "stopped": ["jr_1"]}).encode()
    world.lambda_stub.add_response(
        "invoke",
        {"StatusCode": 200, "Payload": StreamingBody(io.BytesIO(body), len(body))},
        {"FunctionName": "ingest-control-plane", "Payload": ANY},
    )
    # When make deploy updates the stack with new job code
    assert run("deploy", "--yes", *argv) == 0
    # Then, after the update finished, the control plane is asked to restart the job
    assert world.calls.index("ExecuteChangeSet") < world.calls.index("Invoke")
    assert json.loads(world.requests["Invoke"]["Payload"]) == {"command": "restart"}
    assert changed in capsys.readouterr().out
    world.lambda_stub.assert_no_pending_responses()


def test_the_job_restarts_on_a_change_of_what_its_definition_is_made_of_and_only_then() -> None:
    job = set(deploy.job_parameters(render()))
    code = {"JobScriptKey", "JobPackageKey", "JobNativeWheelKey", "JobWheelhousePrefix", "RoutesUri"}
    assert code | {"MetricsNamespace", "QueryName", "TriggerIntervalSeconds", "WorkerType"} <= job
    # the alarms' e-mail, the landing prefix (the role's, the Lambda's), the Lambdas' code: no restart
    assert not job & {"AlarmEmail", "LandingPrefix", "ManifestLambdaKey", "ControlPlaneKey", "MaxWorkers"}


def test_the_native_wheel_is_uploaded_under_its_own_file_name(tmp_path: Path) -> None:
    # pip takes a wheel's name, version and tags from its file name (PEP 427): a key that renamed it
    # would make Glue's pip refuse the file
    from packaging.utils import parse_wheel_filename

    wheel = tmp_path / "ndjson_arrow-0.1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    wheel.write_bytes(b"wheel")
    key = content_key(wheel)
    assert key.startswith("artifacts/") and key.endswith("/ndjson_arrow-0.1.0-cp311-cp311-manylinux_2_17_x86_64.whl")
    name, version, _, tags = parse_wheel_filename(key.rsplit("/", 1)[1])
    assert (name, str(version)) == ("ndjson-arrow", "0.1.0")
    assert {t.platform for t in tags} == {"manylinux_2_17_x86_64"}


# -- the concurrency check ----------------------------------------------------------------------


def account(limit: int, unreserved: int) -> Any:
    client = boto3.client("lambda", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response(
        "get_account_settings",
        {"AccountLimit": {"ConcurrentExecutions": limit, "UnreservedConcurrentExecutions": unreserved}},
    )
    stub.activate()
    return client


def test_reservations_must_leave_the_unreserved_minimum() -> None:
    # Given a small account (limit 120): at most 20 can be reserved
    wanted = {"ManifestLambdaReservedConcurrency": "20", "ControlPlaneReservedConcurrency": "1"}
    with pytest.raises(DeployError, match=r"ManifestLambdaReservedConcurrency=20.*ConcurrentExecutions=120"):
        concurrency.check(account(120, 120), wanted, {})
    # And on an update the stack's own current reservations count as available: 121 - 21 held
    # leaves 100 unreserved, and the same 21 can be reserved again
    concurrency.check(account(121, 100), wanted, wanted)
    # And unreserved (0) always fits
    concurrency.check(account(10, 10), {"ManifestLambdaReservedConcurrency": "0"}, {})


def test_maximum_concurrency_above_the_account_limit_is_refused() -> None:
    with pytest.raises(DeployError, match=r"ManifestLambdaMaxConcurrency=50 .*ConcurrentExecutions=10"):
        concurrency.check(account(10, 10), {"ManifestLambdaMaxConcurrency": "50"}, {})


# -- destroy ------------------------------------------------------------------------------------


def test_destroy_of_a_missing_stack_is_a_clear_message(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    not_found(world.cfn_stub)
    assert run("destroy", "--empty") == 2
    err = capsys.readouterr().err
    assert f"stack {STACK} does not exist" in err and "Traceback" not in err


@pytest.fixture
def running_stack(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Moto resources of a live stack: versioned buckets with logs, a schedule, a mapping, a run."""
    from moto.core.responses import ActionResult
    from moto.glue.responses import GlueResponse
    from moto.moto_api import state_manager

    def batch_stop_job_run(self: GlueResponse) -> ActionResult:  # moto has no BatchStopJobRun
        name = self._get_param("JobName")
        for run_id in self._get_param("JobRunIds"):
            self.glue_backend.get_job_run(name, run_id).status = "STOPPED"
        return ActionResult({"SuccessfulSubmissions": [], "Errors": []})

    monkeypatch.setattr(GlueResponse, "batch_stop_job_run", batch_stop_job_run, raising=False)
    state_manager.set_transition(model_name="glue::job_run", transition={"progression": "manual", "times": 10**9})
    s3, glue, events = world.clients["s3"], world.clients["glue"], world.clients["events"]
    ids = {"logs": "ingest-logs", "data": "ingest-data", "rule": "ingest-schedule", "job": "ingest-streaming"}
    for bucket in (ids["logs"], ids["data"]):
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_acl(Bucket=ids["logs"], ACL="log-delivery-write")
    s3.put_bucket_logging(
        Bucket=ids["data"],
        BucketLoggingStatus={"LoggingEnabled": {"TargetBucket": ids["logs"], "TargetPrefix": "data/"}},
    )
    for i in range(600):  # two versions and a delete marker each: 1,800 entries, two DeleteObjects
        s3.put_object(Bucket=ids["data"], Key=f"k{i}", Body=b"1")
        s3.put_object(Bucket=ids["data"], Key=f"k{i}", Body=b"2")
        s3.delete_object(Bucket=ids["data"], Key=f"k{i}")
    s3.put_object(Bucket=ids["logs"], Key="data/log", Body=b"log")
    events.put_rule(Name=ids["rule"], ScheduleExpression="rate(2 minutes)", State="ENABLED")
    queue = boto3.client("sqs", region_name=REGION).create_queue(QueueName="landing")["QueueUrl"]
    queue_arn = boto3.client("sqs", region_name=REGION).get_queue_attributes(
        QueueUrl=queue, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    role = boto3.client("iam", region_name=REGION).create_role(
        RoleName="fn", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []})
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr("h.py", "def h(e, c): pass\n")
    world.moto_lambda.create_function(
        FunctionName="manifest", Runtime="python3.11", Role=role, Handler="h.h", Code={"ZipFile": code.getvalue()}
    )
    ids["esm"] = world.moto_lambda.create_event_source_mapping(
        EventSourceArn=queue_arn, FunctionName="manifest", BatchSize=10
    )["UUID"]
    glue.create_job(Name=ids["job"], Role=role, Command={"Name": "gluestreaming", "ScriptLocation": "s3://a/m.py"})
    ids["run"] = glue.start_job_run(JobName=ids["job"])["JobRunId"]
    yield ids
    state_manager.unset_transition("glue::job_run")


def test_destroy_empty_quiets_the_stack_then_empties_versioned_buckets_logs_last(
    world: World, running_stack: dict[str, str]
) -> None:
    ids = running_stack
    # The ESM lives in moto; the rest of the Lambda API (none needed here) stays stubbed.
    world.clients["lambda"] = world.moto_lambda
    world.moto_lambda.meta.events.register("provide-client-params.*.*", world._record)
    resources = [
        ("AccessLogsBucket", ids["logs"], "AWS::S3::Bucket"),
        ("LandingBucket", ids["data"], "AWS::S3::Bucket"),
        ("ControlPlaneSchedule", ids["rule"], "AWS::Events::Rule"),
        ("ManifestLambdaEvents", ids["esm"], "AWS::Lambda::EventSourceMapping"),
        ("GlueJob", ids["job"], "AWS::Glue::Job"),
    ]
    world.cfn_stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE"), {"StackName": STACK})
    world.cfn_stub.add_response(
        "list_stack_resources",
        {
            "StackResourceSummaries": [
                {
                    "LogicalResourceId": logical,
                    "PhysicalResourceId": physical,
                    "ResourceType": kind,
                    "LastUpdatedTimestamp": NOW,
                    "ResourceStatus": "CREATE_COMPLETE",
                }
                for logical, physical, kind in resources
            ]
        },
        {"StackName": STACK},
    )
    world.cfn_stub.add_response("delete_stack", {}, {"StackName": STACK})
    world.cfn_stub.add_response("describe_stacks", world.stack("DELETE_COMPLETE"), {"StackName": STACK})

    # When make destroy EMPTY=1 YES=1 runs
    assert run("destroy", "--empty", "--yes") == 0

    # Then the schedule, the mapping and the job run are stopped before any object is deleted,
    # the log bucket is emptied last, and the stack is deleted after that
    calls = world.calls
    first_delete = calls.index("DeleteObjects")
    for quieting in ("DisableRule", "UpdateEventSourceMapping", "BatchStopJobRun", "PutBucketLogging"):
        assert calls.index(quieting) < first_delete
    assert calls.index("DeleteStack") > max(i for i, c in enumerate(calls) if c == "DeleteObjects")
    # 1,800 data entries in batches of at most 1,000, then the logs (moto writes access logs too)
    buckets = [b for b, _ in world.deleted]
    assert buckets[:2] == [ids["data"], ids["data"]] and set(buckets[2:]) == {ids["logs"]}
    assert sum(n for b, n in world.deleted if b == ids["data"]) == 1800
    assert max(n for _, n in world.deleted) <= 1000
    # And the state is what a delete needs
    s3 = world.clients["s3"]
    for bucket in (ids["logs"], ids["data"]):
        listing = s3.list_object_versions(Bucket=bucket)
        assert not listing.get("Versions") and not listing.get("DeleteMarkers")
    assert world.clients["events"].describe_rule(Name=ids["rule"])["State"] == "DISABLED"
    assert world.moto_lambda.get_event_source_mapping(UUID=ids["esm"])["State"] in {"Disabled", "Disabling"}
    job_run = world.clients["glue"].get_job_run(JobName=ids["job"], RunId=ids["run"])["JobRun"]
    assert job_run["JobRunState"] == "STOPPED"
    world.cfn_stub.assert_no_pending_responses()


def test_destroy_empties_late_access_logs_and_retries_the_delete(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stack with a log bucket, where a late access log lands after it was emptied
    s3 = world.clients["s3"]
    s3.create_bucket(Bucket="ingest-logs")
    s3.put_bucket_versioning(Bucket="ingest-logs", VersioningConfiguration={"Status": "Enabled"})
    late = iter([1])
    world.cfn.meta.events.register(
        "after-call.cloudformation.DeleteStack",
        lambda **_: next(late, None) and s3.put_object(Bucket="ingest-logs", Key="late-log", Body=b"x"),
    )
    logs = {
        "StackResourceSummaries": [
            {
                "LogicalResourceId": "AccessLogsBucket",
                "PhysicalResourceId": "ingest-logs",
                "ResourceType": "AWS::S3::Bucket",
                "LastUpdatedTimestamp": NOW,
                "ResourceStatus": "DELETE_FAILED",
            }
        ]
    }
    stub = world.cfn_stub
    stub.add_response("describe_stacks", world.stack("UPDATE_COMPLETE"), {"StackName": STACK})
    stub.add_response("list_stack_resources", logs, {"StackName": STACK})
    stub.add_response("delete_stack", {}, {"StackName": STACK})
    stub.add_response("describe_stacks", world.stack("DELETE_FAILED"), {"StackName": STACK})
    events = failed_events()
    events["StackEvents"][1].update(
        LogicalResourceId="AccessLogsBucket",
        ResourceType="AWS::S3::Bucket",
        ResourceStatus="DELETE_FAILED",
        ResourceStatusReason="The bucket you tried to delete is not empty",
    )
    stub.add_response("describe_stack_events", events, {"StackName": STACK})
    stub.add_response("list_stack_resources", logs, {"StackName": STACK})
    stub.add_response("delete_stack", {}, {"StackName": STACK})
    stub.add_response("describe_stacks", world.stack("DELETE_COMPLETE"), {"StackName": STACK})
    # When make destroy EMPTY=1 YES=1 runs
    assert run("destroy", "--empty", "--yes") == 0
    # Then the first delete's failure is shown with its reason, the late log is removed, and the
    # second delete finishes
    out = capsys.readouterr().out
    assert "AccessLogsBucket (AWS::S3::Bucket): The bucket you tried to delete is not empty" in out
    assert world.calls.count("DeleteStack") == 2
    assert not s3.list_object_versions(Bucket="ingest-logs").get("Versions")
    stub.assert_no_pending_responses()


def test_waiting_for_job_runs_is_bounded() -> None:
    # Given a run that never leaves STOPPING
    glue = boto3.client("glue", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(glue)
    stopping = {"JobRuns": [{"Id": "jr_1", "JobRunState": "STOPPING"}]}
    stub.add_response("get_job_runs", stopping)
    stub.add_response("batch_stop_job_run", {"SuccessfulSubmissions": [], "Errors": []})
    for _ in range(4):
        stub.add_response("get_job_runs", stopping)
    slept: list[float] = []
    # When destroy waits for it, Then it gives up after the bound with a message naming the run
    with stub, pytest.raises(DeployError, match=r"still has active runs after 45s: jr_1"):
        teardown.stop_runs(glue, "job", wait_s=45, poll_s=15, sleep=slept.append)
    assert slept == [15, 15, 15]


def test_a_routing_file_is_checked_as_the_job_checks_it_then_shipped_as_json(tmp_path: Path) -> None:
    from contracts.routing import parse_routing

    good = tmp_path / "routes.yaml"
    good.write_text(
        "tables:\n  orders: {columns: {ts: timestamp}, partition_by: 'day(ts)'}\n  clicks: {}\n"
        "routes:\n  - {prefix: orders/, table: orders}\n  - {prefix: clicks/, table: clicks}\n"
    )
    shipped = deploy.routes_artifact(good, {})
    assert parse_routing(shipped, source="shipped.json").table_of("orders/1.json") == "orders"
    # a table the job would refuse at start-up is refused before anything is uploaded, naming it
    bad = tmp_path / "bad.yaml"
    bad.write_text("tables: {orders: {partition_by: 'day(ts)'}}\nroutes: [{table: orders}]\n")
    with pytest.raises(DeployError, match=r"table 'orders'.*day\(ts\)"):
        deploy.routes_artifact(bad, {})
    with pytest.raises(DeployError, match="leave SchemaUri, PartitionBy and ExpectUri"):
        deploy.routes_artifact(good, {"PartitionBy": "day(_event_time)"})
    with pytest.raises(DeployError, match="is not a file"):
        deploy.routes_artifact(tmp_path / "missing.yaml", {})


def test_drop_catalog_drops_the_routed_tables_and_then_the_database(aws: None) -> None:
    from contracts.routing import Route, Routing, TableSpec

    glue, s3 = boto3.client("glue", region_name="us-east-1"), boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="deploy")
    routing = Routing(
        tables={"orders": TableSpec(), "clicks": TableSpec()}, routes=[Route(table="orders")], unmatched="clicks"
    )
    s3.put_object(Bucket="deploy", Key="routes/x.json", Body=routing.to_json())
    glue.create_database(DatabaseInput={"Name": "db"})
    for name in ("events", "load_history", "orders", "clicks"):
        glue.create_table(DatabaseName="db", TableInput={"Name": name})
    # When the catalog is dropped with the stack's routing file
    routed = teardown.routed_tables(s3, "s3://deploy/routes/x.json")
    teardown.drop_catalog(glue, "db", "events", also=routed)
    # Then every table the job wrote went, and the database with them
    assert routed == ["orders", "clicks"] and glue.get_databases()["DatabaseList"] == []
    assert teardown.routed_tables(s3, "") == []
    with pytest.raises(DeployError, match="reading the routing file"):
        teardown.routed_tables(s3, "s3://deploy/routes/gone.json")
