"""The Lambdas run on the SDK their zip carries, the one the tests run, and every request they make in the
tests is checked against it (tests/lambdas/sdk.py).

Sources: AWS Lambda Developer Guide, "Working with .zip file archives for Python Lambda functions" (Lambda
searches the function's directory, /var/task, before the runtime's libraries, and recommends packaging the
SDK); infra/runtimes/lambda-python3.11.txt (the runtime's boto3/botocore 1.34.131); botocore 1.34.131's
Glue model (service-2.json: TableOptimizerConfiguration has roleArn and enabled only) against 1.44.8's
(retentionConfiguration, orphanFileDeletionConfiguration, compactionConfiguration, vpcConfiguration).
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from packaging.requirements import Requirement

from infra.runtime import ROOT, lambda_runtime_pins
from lambdas.control_plane.optimizers import Keeper, OptimizerWatch
from tests.lambdas import sdk

KEEPER = Keeper("arn:aws:iam::123456789012:role/optimizers", "s3://out/data", 3)
WHERE = {"CatalogId": "123456789012", "DatabaseName": "db", "TableName": "orders"}
# The request the control plane made before this change (Keeper.configuration then): refused on the
# runtime's SDK, so the routed tables and the load history never got their optimizers on AWS
BEFORE = {
    **WHERE,
    "Type": "retention",
    "TableOptimizerConfiguration": {
        "roleArn": KEEPER.role_arn,
        "enabled": True,
        "retentionConfiguration": {
            "icebergConfiguration": {
                "snapshotRetentionPeriodInDays": 1,
                "numberOfSnapshotsToRetain": 10,
                "cleanExpiredFiles": True,
            }
        },
    },
}


def pins(extra: str) -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {}
    for line in project["optional-dependencies"][extra]:
        req = Requirement(line)
        if str(req.specifier).startswith("=="):
            out[req.name] = str(req.specifier)[2:]
    return out


def test_the_lambda_zip_pins_the_sdk_the_tests_run() -> None:
    # Given the lambda extra (what infra.package puts in the zip) and dev (what the moto tests run)
    shipped, dev = pins("lambda"), pins("dev")
    # Then both pin boto3 and botocore exactly, to one version, the one installed here
    assert shipped["boto3"] == shipped["botocore"] == dev["boto3"] == dev["botocore"]
    assert importlib.metadata.version("botocore") == shipped["botocore"]
    assert importlib.metadata.version("boto3") == shipped["boto3"]
    # newer than the runtime's, whose Glue model lacks the optimizers' configurations
    runtime = lambda_runtime_pins()["botocore"]
    assert tuple(map(int, shipped["botocore"].split("."))) > tuple(map(int, runtime.split(".")))


def test_the_check_runs_on_the_zips_sdk_as_lambda_imports_it() -> None:
    # the zip unpacked first on sys.path of the Lambda-like interpreter: its botocore, not the runtime's
    shipped = sdk.shipped()
    assert shipped.botocore_version == pins("lambda")["botocore"]
    assert "/lambda-task/botocore/" in shipped.botocore_path
    assert sdk.runtime().botocore_version == lambda_runtime_pins()["botocore"] == "1.34.131"


@pytest.mark.parametrize(
    ("request_", "runtime_refuses"),
    [
        (BEFORE, '"retentionConfiguration"'),
        (
            {
                **WHERE,
                "Type": "orphan_file_deletion",
                "TableOptimizerConfiguration": KEEPER.configuration("orders", "orphan_file_deletion"),
            },
            '"orphanFileDeletionConfiguration"',
        ),
        (
            {
                **WHERE,
                "Type": "compaction",
                "TableOptimizerConfiguration": KEEPER.configuration("orders", "compaction"),
            },
            None,
        ),
    ],
)
def test_the_optimizer_requests_the_runtime_sdk_refuses_the_zips_makes(
    request_: dict[str, Any], runtime_refuses: str | None
) -> None:
    # When CreateTableOptimizer's parameters are validated as the client validates them before sending
    runtime = sdk.runtime().error("glue", "CreateTableOptimizer", sdk.encode(request_))
    shipped = sdk.shipped().error("glue", "CreateTableOptimizer", sdk.encode(request_))
    # Then the runtime's botocore 1.34.131 raises ParamValidationError on the configurations it lacks,
    # and the zip's sends them
    if runtime_refuses is None:
        assert runtime is None
    else:
        assert runtime is not None and f"Unknown parameter in TableOptimizerConfiguration: {runtime_refuses}" in runtime
    assert shipped is None


def test_the_recorded_requests_of_the_lambda_code_fail_on_an_sdk_that_cannot_make_them() -> None:
    # Given the control plane's code creating a table's missing orphan-file optimizer (Glue scripted)
    sdk.install()
    glue = boto3.client("glue", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(glue)
    stub.add_response("get_tables", {"TableList": [{"Name": "orders"}]})
    not_found = {"ErrorCode": "EntityNotFoundException", "ErrorMessage": "none"}
    failures = [
        {"catalogId": "123456789012", "databaseName": "db", "tableName": t, "type": k, "error": not_found}
        for t, kinds in (
            ("events", ("compaction", "orphan_file_deletion")),
            ("orders", ("compaction", "orphan_file_deletion", "retention")),
        )
        for k in kinds
    ]
    stub.add_response("batch_get_table_optimizer", {"TableOptimizers": [], "Failures": failures})
    stub.add_response("create_table_optimizer", {})
    stub.add_response("create_table_optimizer", {})
    stub.add_response("list_crawlers", {})
    stub.activate()
    watch = OptimizerWatch(glue, "123456789012", "db", "events", kept=lambda: ["orders"], keeper=KEEPER)
    # When its requests are recorded (as tests/lambdas/conftest.py records every test's)
    with sdk.recording() as requests:
        report = watch.watch()
        glue.list_crawlers()  # a test's own call: not the Lambda's, not recorded
    assert report.done == ("orders compaction: created", "orders orphan_file_deletion: created")
    assert [r.operation for r in requests] == [
        "GetTables",
        "BatchGetTableOptimizer",
        "CreateTableOptimizer",
        "CreateTableOptimizer",
    ]
    assert all(r.where.startswith("lambdas.control_plane.optimizers:") for r in requests)
    # Then on the runtime's SDK they fail (a suite run on it fails), on the zip's they pass
    refused = sdk.runtime().refused(requests)
    assert len(refused) == 2 and "GetTables" in refused[0] and '"AttributesToGet"' in refused[0]
    assert "CreateTableOptimizer" in refused[1] and '"orphanFileDeletionConfiguration"' in refused[1]
    assert sdk.shipped().refused(requests) == []


def test_the_control_plane_may_keep_the_optimizers_of_the_job_tables() -> None:
    # Service Authorization Reference, "Actions defined by AWS Glue": each API the watch calls is an IAM
    # action of its own (glue:UpdateTableOptimizer, glue:DeleteTableOptimizer, glue:GetTables), on the
    # catalog, database and table resources
    from infra.build import render

    resources = render()["Resources"]
    (policy,) = resources["ControlPlaneRole"]["Properties"]["Policies"]
    (statement,) = [s for s in policy["PolicyDocument"]["Statement"] if s["Sid"] == "KeepTheTableOptimizers"]
    for action in (
        "glue:BatchGetTableOptimizer",
        "glue:CreateTableOptimizer",
        "glue:UpdateTableOptimizer",
        "glue:DeleteTableOptimizer",
        "glue:GetTables",
    ):
        assert action in statement["Action"], action
    table = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:table/${DatabaseName}/*"
    assert {"Fn::Sub": table} in statement["Resource"]
