"""A stack's first day and last, through ``infra.deploy.main`` (what ``make deploy``, ``make plan``
and ``make destroy`` run) against moto and the small CloudFormation of ``fake_cloudformation``, which
enforces the AWS rules each scenario relies on (listed, with their sources, in its docstring). The
template is the real one, rendered: its DeletionPolicy attributes decide what a rollback and a
delete keep.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from infra import deploy, deployer_policy, plan
from infra import stack as cfn_stack
from infra.build import render
from tests.infra.fake_cloudformation import ACCOUNT, FakeCloudFormation

STACK = "ingest"
REGION = "us-east-1"
OUTPUT = f"{STACK}-output-{ACCOUNT}-{REGION}"
ARTIFACTS = f"{STACK}-artifacts-{ACCOUNT}-{REGION}"
LOGS = f"{STACK}-access-logs-{ACCOUNT}-{REGION}"
LANDING = f"{STACK}-landing-{ACCOUNT}-{REGION}"
DATABASE, TABLE = "ndjson_ingest", "events"
SERVICES = ("sts", "s3", "lambda", "glue", "events", "kms", "cloudwatch", "dynamodb")


@functools.cache
def template() -> dict[str, Any]:
    return render()


class Life:
    """A fresh account: moto services, the fake CloudFormation, and the deploy tool's clients."""

    def __init__(self, tmp: Path) -> None:
        self.answers: list[str] | None = None  # None: no terminal; else the answers typed, in order
        self.questions: list[str] = []
        self.tool_calls: set[tuple[str, str]] = set()
        self.clients = {name: boto3.client(name, region_name=REGION) for name in SERVICES}  # type: ignore[call-overload]
        for name, client in self.clients.items():
            client.meta.events.register("provide-client-params.*.*", functools.partial(self._record, name))
        # moto has no GetAccountSettings: the account's numbers are answered here
        self.clients["lambda"].meta.events.register("before-call.lambda.GetAccountSettings", _account_settings)
        own: dict[str, Any] = {
            n: boto3.client(n, region_name=REGION) for n in ("s3", "kms", "glue", "events", "dynamodb")
        }
        self.cfn = FakeCloudFormation(**own, region=REGION)
        self.clients["cloudformation"] = self.cfn
        self.s3: Any = own["s3"]
        self.glue: Any = own["glue"]
        self.kms: Any = own["kms"]
        self.dynamodb: Any = own["dynamodb"]
        self.artifacts = {}
        for name in ("lambdas", "job_script", "job_package"):
            path = tmp / f"{name}.zip"
            path.write_bytes(name.encode())
            self.artifacts[name] = path
        wheel = tmp / "ndjson_arrow-0.1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
        wheel.write_bytes(b"wheel")
        self.artifacts["job_native_wheel"] = wheel

    def _record(self, service: str, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.tool_calls.add((service, model.name))

    def ask(self) -> Callable[[str], bool] | None:
        if self.answers is None:
            return None

        def answer(question: str) -> bool:
            self.questions.append(question)
            return self.answers.pop(0) == "y" if self.answers else False

        return answer

    def objects(self, bucket: str) -> list[str]:
        return [o["Key"] for o in self.s3.list_objects_v2(Bucket=bucket).get("Contents", [])]

    def buckets(self) -> set[str]:
        return {b["Name"] for b in self.s3.list_buckets()["Buckets"]}

    def key_state(self, key_id: str) -> str:
        return str(self.kms.describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"])

    def job_writes(self) -> None:
        """What the running job leaves: the table's metadata and files, checkpoints, access logs."""
        self.s3.put_object(Bucket=OUTPUT, Key=f"data/{TABLE}/metadata/00001.metadata.json", Body=b"{}")
        self.s3.put_object(Bucket=OUTPUT, Key=f"data/{TABLE}/data/part-0.parquet", Body=b"x" * 2048)
        self.s3.put_object(Bucket=ARTIFACTS, Key="checkpoint/gen-0/offsets/0", Body=b"v1")
        self.s3.put_object(Bucket=LOGS, Key="output/2026-11-27-00-00-00-AAAA", Body=b"log")


def _account_settings(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
    limits = {"ConcurrentExecutions": 1000, "UnreservedConcurrentExecutions": 1000}
    return AWSResponse("", 200, HTTPHeaders(), None), {"AccountLimit": limits}


class FakeSession:
    region_name = REGION

    def __init__(self, clients: dict[str, Any]) -> None:
        self.clients = clients

    def client(self, name: str, **_: Any) -> Any:
        return self.clients[name]


@pytest.fixture
def life(aws: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Life:
    world = Life(tmp_path)
    monkeypatch.setattr(deploy, "session", lambda region: FakeSession(world.clients))
    monkeypatch.setattr(deploy, "build", lambda out: world.artifacts)
    monkeypatch.setattr(deploy, "wheelhouse", lambda out: ("wheelhouse/0123", []))
    monkeypatch.setattr(deploy, "render", template)
    monkeypatch.setattr(plan, "terminal_prompt", world.ask)
    return world


def run(*argv: str) -> int:
    return deploy.main([*argv, "--stack", STACK, "--region", REGION])


def deployed(life: Life) -> None:
    assert run("deploy", "--yes") == 0
    assert life.cfn.stacks[STACK].status == "CREATE_COMPLETE"


def test_the_tables_files_and_key_are_kept_by_a_delete_and_removed_by_a_failed_create() -> None:
    # DeletionPolicy RetainExceptOnCreate: kept on stack deletion, deleted if the create that made it
    # rolls back (CloudFormation User Guide, "DeletionPolicy attribute"), as the catalog already is: a
    # destroy keeps the three together, and a failed first create leaves nothing named to collide with
    resources = template()["Resources"]
    for name in ("OutputBucket", "Key", "GlueDatabase", "IcebergTable", "HiveTable"):
        assert resources[name]["DeletionPolicy"] == "RetainExceptOnCreate", name
        assert resources[name]["UpdateReplacePolicy"] == "Retain", name


# -- the first day ------------------------------------------------------------------------------


def test_a_first_create_sets_the_stack_policy_once_the_stack_exists(life: Life) -> None:
    # Given no stack; When make deploy YES=1 creates it
    assert run("deploy", "--yes") == 0
    # Then the stack exists, and its policy was set after the create finished: CloudFormation refuses
    # a stack policy on a stack in REVIEW_IN_PROGRESS (envato/stack_master#178, guardian/riff-raff#624;
    # the fake refuses it, as a Stubber scripting success did not)
    stack = life.cfn.stacks[STACK]
    assert stack.status == "CREATE_COMPLETE" and stack.policy == cfn_stack.STACK_POLICY
    assert life.cfn.calls.index("ExecuteChangeSet") < life.cfn.calls.index("SetStackPolicy")
    assert {OUTPUT, ARTIFACTS, LOGS, LANDING} <= life.buckets()
    assert life.glue.get_table(DatabaseName=DATABASE, Name=TABLE)["Table"]["Name"] == TABLE


def test_deploy_without_yes_shows_the_plan_and_refuses_without_a_terminal(
    life: Life, capsys: pytest.CaptureFixture[str]
) -> None:
    # When make deploy runs with no terminal to ask on and no YES=1
    assert run("deploy") == 2
    out, err = capsys.readouterr()
    # Then it printed the change set and the costs, applied nothing, and left no stack behind
    assert "action  logical id" in out and "OutputBucket" in out and "monthly cost (estimate)" in out
    assert err.strip().count("\n") == 0 and "YES=1" in err
    assert "ExecuteChangeSet" not in life.cfn.calls and STACK not in life.cfn.stacks
    assert OUTPUT not in life.buckets()


def test_make_plan_applies_nothing_and_an_answer_no_applies_nothing(life: Life) -> None:
    assert run("plan") == 0
    assert STACK not in life.cfn.stacks and "ExecuteChangeSet" not in life.cfn.calls
    life.answers = ["n"]
    assert run("deploy") == 1
    assert life.questions == [f"apply this change set to stack {STACK}? [y/N] "]
    assert STACK not in life.cfn.stacks


@pytest.mark.parametrize("how", ["at a terminal", "in CI"])
def test_a_first_create_that_fails_late_with_data_is_recovered_by_one_flag(
    life: Life, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    # Given a first create whose late resource fails after the job wrote to the buckets: S3 refuses to
    # delete a bucket holding objects (DeleteBucket "BucketNotEmpty"), so the rollback fails
    life.cfn.fail_at = "ControlPlane"
    life.cfn.before_failure = lambda stack: life.job_writes()
    assert run("deploy", "--yes") == 2
    assert life.cfn.stacks[STACK].status == "ROLLBACK_FAILED"
    first_key = life.cfn.stacks[STACK].resources["Key"].physical
    capsys.readouterr()
    # When make deploy runs again, Then it says why and exactly which command recovers
    assert run("deploy") == 2
    out, err = capsys.readouterr()
    assert "ControlPlane (AWS::Lambda::Function)" in out
    assert f"make deploy STACK={STACK} REGION={REGION} REPLACE_FAILED=1" in err
    # And with the flag but no terminal and no YES=1, it deletes no data and says YES=1
    assert run("deploy", "--replace-failed") == 2
    assert "YES=1" in capsys.readouterr().err and life.objects(OUTPUT)
    # When the cause is fixed and make deploy REPLACE_FAILED=1 runs (answering yes, or YES=1 in CI)
    life.cfn.fail_at = None
    # (and S3 delivers an access log late, after the buckets were emptied, best effort: the first
    # delete then fails on a bucket that is not empty, which a second emptying clears)
    late = [f"output/late-{n}" for n in range(1)]

    def deliver_late_log(stack: Any) -> None:
        if late:
            life.s3.put_object(Bucket=LOGS, Key=late.pop(), Body=b"log")

    life.cfn.before_delete = deliver_late_log
    if how == "at a terminal":
        life.answers = ["y", "y"]
        assert run("deploy", "--replace-failed") == 0
        assert "this deletes data" in life.questions[0]
    else:
        assert run("deploy", "--replace-failed", "--yes") == 0
    # Then the buckets were emptied, the stack deleted, what its retain policies kept of the failed
    # create removed (a stack delete is not the create's rollback: RetainExceptOnCreate keeps), and
    # the stack created again, fresh, under its policy
    stack = life.cfn.stacks[STACK]
    assert stack.status == "CREATE_COMPLETE" and stack.policy == cfn_stack.STACK_POLICY
    assert life.objects(OUTPUT) == [] and life.objects(ARTIFACTS) == []
    assert life.key_state(first_key) == "PendingDeletion"
    assert life.key_state(stack.resources["Key"].physical) == "Enabled"


def test_an_update_leaves_the_table_the_job_owns_untouched(life: Life, capsys: pytest.CaptureFixture[str]) -> None:
    deployed(life)
    # Given the job adopted the table (Iceberg metadata the template does not know)
    adopted = {"table_type": "ICEBERG", "metadata_location": f"s3://{OUTPUT}/data/{TABLE}/metadata/00001.metadata.json"}
    life.glue.update_table(
        DatabaseName=DATABASE,
        TableInput={
            "Name": TABLE,
            "StorageDescriptor": {"Location": f"s3://{OUTPUT}/data/{TABLE}"},
            "Parameters": adopted,
        },
    )
    # When a parameter update is deployed
    assert run("deploy", "--yes", "--param", "MaxWorkers=20") == 0
    out = capsys.readouterr().out
    # Then it ran, under the stack policy (set before the execution), and left the table as the job made it
    assert life.cfn.stacks[STACK].status == "UPDATE_COMPLETE" and "Modify" in out
    calls = life.cfn.calls
    last_execute = len(calls) - 1 - calls[::-1].index("ExecuteChangeSet")
    assert "SetStackPolicy" in calls[calls.index("SetStackPolicy", calls.index("ExecuteChangeSet") + 1) : last_execute]
    assert life.glue.get_table(DatabaseName=DATABASE, Name=TABLE)["Table"]["Parameters"] == adopted
    # And an update that would change the table is refused before it runs, the table untouched
    assert run("deploy", "--yes", "--param", "TableName=renamed") == 2
    assert "never updated by CloudFormation" in capsys.readouterr().err
    assert life.glue.get_table(DatabaseName=DATABASE, Name=TABLE)["Table"]["Parameters"] == adopted


# -- the last day -------------------------------------------------------------------------------


def test_destroy_keeps_the_tables_files_catalog_and_key_together_and_says_what_they_cost(
    life: Life, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed(life)
    key = life.cfn.stacks[STACK].resources["Key"].physical
    life.job_writes()
    life.s3.put_object(Bucket=LANDING, Key="incoming/a.ndjson", Body=b"{}\n")
    capsys.readouterr()
    # When make destroy EMPTY=1 runs with no terminal and no YES=1, Then it deletes nothing
    assert run("destroy", "--empty") == 2
    assert "YES=1" in capsys.readouterr().err
    assert life.objects(LANDING) and STACK in life.cfn.stacks
    # When make destroy EMPTY=1 YES=1 runs
    assert run("destroy", "--empty", "--yes") == 0
    out = capsys.readouterr().out
    # Then the stack and the buckets that go with it are gone, and the table's files, its catalog and
    # the key that encrypts them are kept (DeletionPolicy RetainExceptOnCreate), and priced
    assert STACK not in life.cfn.stacks
    assert LANDING not in life.buckets() and ARTIFACTS not in life.buckets() and LOGS not in life.buckets()
    assert sorted(life.objects(OUTPUT)) == [
        f"data/{TABLE}/data/part-0.parquet",
        f"data/{TABLE}/metadata/00001.metadata.json",
    ]
    assert life.glue.get_table(DatabaseName=DATABASE, Name=TABLE)["Table"]["Name"] == TABLE
    assert life.key_state(key) == "Enabled"
    assert f"s3://{OUTPUT}: 0.00 GB, $0.00/month" in out and f"KMS key {key}: $1.00/month" in out
    assert f"make destroy STACK={STACK} DROP_DATA=1 removes them" in out
    # (and the key index, which knows each key's loaded version: a table kept without it would take a
    # later version of a key as new, its earlier rows left beside)
    assert life.dynamodb.describe_table(TableName=f"{STACK}-key-index")["Table"]["TableStatus"] == "ACTIVE"
    assert f"DynamoDB table {STACK}-key-index: 0.00 GB, $0.00/month" in out
    # And a new stack over what was kept is refused, saying how to remove it
    assert run("deploy", "--yes") == 2
    assert "DROP_DATA=1" in capsys.readouterr().err
    # When make destroy DROP_DATA=1 YES=1 runs after the stack is gone
    assert run("destroy", "--drop-data", "--yes") == 0
    # Then they went together: catalog, key index, files and bucket, key (scheduled)
    assert OUTPUT not in life.buckets() and life.glue.get_databases()["DatabaseList"] == []
    assert life.key_state(key) == "PendingDeletion"
    assert life.dynamodb.list_tables()["TableNames"] == []


def test_destroy_drop_data_removes_the_stack_and_what_it_would_keep(life: Life) -> None:
    deployed(life)
    key = life.cfn.stacks[STACK].resources["Key"].physical
    life.job_writes()
    assert run("destroy", "--drop-data", "--yes") == 0
    assert STACK not in life.cfn.stacks
    assert not {OUTPUT, ARTIFACTS, LOGS, LANDING} & life.buckets()
    assert life.glue.get_databases()["DatabaseList"] == [] and life.key_state(key) == "PendingDeletion"
    assert life.dynamodb.list_tables()["TableNames"] == []
    # README: "the key is scheduled for deletion in 30 days"; "The deployment bucket is always kept"
    deletion = life.clients["kms"].describe_key(KeyId=key)["KeyMetadata"]["DeletionDate"]
    assert 29 <= (deletion - datetime.now(deletion.tzinfo)).days <= 30
    assert deploy.deploy_bucket_name(STACK, ACCOUNT, REGION) in life.buckets()


# -- the deployer's permissions -----------------------------------------------------------------


def test_every_call_of_a_whole_lifecycle_is_in_the_deployer_policy(life: Life) -> None:
    # Given a failed first create, its recovery, an update, a destroy that keeps and one that drops
    life.cfn.fail_at = "ControlPlane"
    life.cfn.before_failure = lambda stack: life.job_writes()
    run("deploy", "--yes")
    life.cfn.fail_at = None
    assert run("deploy", "--replace-failed", "--yes") == 0
    assert run("deploy", "--yes", "--param", "MaxWorkers=20") == 0
    assert run("plan") == 0
    assert run("destroy", "--empty", "--yes") == 0
    assert run("destroy", "--drop-data", "--yes") == 0
    # Then each AWS call the tool made is granted by the generated deployer policy
    cfn = {("cloudformation", op) for op in life.cfn.calls}
    made = life.tool_calls | cfn
    assert made - set(deployer_policy.TOOL_CALLS) == set()
    granted = {a for st in deployer_policy.policy(template())["Statement"] for a in st["Action"]}
    assert {a for call in made for a in deployer_policy.TOOL_CALLS[call]} <= granted


def test_the_committed_deployer_policy_is_what_the_generator_writes() -> None:
    committed = json.loads((Path(__file__).parents[2] / "docs" / "deployer-policy.json").read_text())
    assert committed == deployer_policy.policy(template()), (
        "run: python -m infra.deployer_policy > docs/deployer-policy.json"
    )
    # a role's inline policies hold at most 10,240 characters (IAM User Guide, "IAM and AWS STS quotas")
    assert len(json.dumps(committed, separators=(",", ":"))) <= 10_240
