"""AWS rules a first deploy depends on, each checked over the rendered template.

Each test names the rule and where AWS documents it. A rule CloudFormation only enforces at
deploy time (the resource fails to create, the stack rolls back) belongs here, so the next such
mistake fails ``make test`` instead of a user's first ``make deploy``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from infra.build import render
from infra.runtime import STREAMING_WORKER_TYPES, glue_runtimes

T = render()
R: dict[str, Any] = T["Resources"]
P: dict[str, Any] = T["Parameters"]


def of_type(kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in R.items() if v["Type"] == kind}


def role_statements(role_ref: Any) -> list[dict[str, Any]]:
    role = R[role_ref["Fn::GetAtt"][0]]
    return [st for pol in role["Properties"]["Policies"] for st in pol["PolicyDocument"]["Statement"]]


def actions(st: dict[str, Any]) -> list[str]:
    return st["Action"] if isinstance(st["Action"], list) else [st["Action"]]


def grants(statements: list[dict[str, Any]], action: str, resource: Any) -> bool:
    for st in statements:
        if st["Effect"] != "Allow" or action not in actions(st):
            continue
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        if resource in resources:
            return True
    return False


def parameter_default(value: Any) -> Any:
    if isinstance(value, dict) and "Ref" in value:
        return P[value["Ref"]]["Default"]
    return value


def test_a_lambda_dead_letter_target_is_writable_by_its_role() -> None:
    # Lambda checks at CreateFunction that the execution role may send to the DeadLetterConfig target
    # (Lambda Developer Guide, "Adding a dead-letter queue": the role needs sqs:SendMessage or sns:Publish).
    functions = {k: v for k, v in of_type("AWS::Lambda::Function").items() if "DeadLetterConfig" in v["Properties"]}
    assert functions, "the control plane keeps a DLQ for failed async invocations"
    for name, fn in functions.items():
        target = fn["Properties"]["DeadLetterConfig"]["TargetArn"]
        kind = R[target["Fn::GetAtt"][0]]["Type"]
        action = "sqs:SendMessage" if kind == "AWS::SQS::Queue" else "sns:Publish"
        assert grants(role_statements(fn["Properties"]["Role"]), action, target), name


def test_no_lambda_reserves_concurrency_by_default() -> None:
    # Lambda keeps at least 100 units of the account's concurrency unreserved
    # (Lambda Developer Guide, "Configuring reserved concurrency"); new accounts may have a quota of 10,
    # so any unconditional reservation fails there. Reservations are parameters, 0 by default.
    for name, fn in of_type("AWS::Lambda::Function").items():
        reserved = fn["Properties"].get("ReservedConcurrentExecutions")
        if reserved is None:
            continue
        _condition, value, otherwise = reserved["Fn::If"]
        assert otherwise == {"Ref": "AWS::NoValue"}, name
        assert parameter_default(value) == 0, name


def test_sqs_event_source_concurrency_is_a_bounded_parameter() -> None:
    # ScalingConfig.MaximumConcurrency must be between 2 and 1000 (Lambda API, ScalingConfig).
    for name, esm in of_type("AWS::Lambda::EventSourceMapping").items():
        ref = esm["Properties"]["ScalingConfig"]["MaximumConcurrency"]
        param = P[ref["Ref"]]
        assert param["MinValue"] >= 2 and param["MaxValue"] <= 1000 and 2 <= param["Default"] <= 1000, name


def test_batch_size_over_ten_comes_with_a_batching_window() -> None:
    # "When you set BatchSize to a value greater than 10, you must set MaximumBatchingWindowInSeconds to at
    # least 1" (Lambda Developer Guide, "Using Lambda with Amazon SQS" -> batching behavior).
    for name, esm in of_type("AWS::Lambda::EventSourceMapping").items():
        props = esm["Properties"]
        batch = parameter_default(props["BatchSize"])
        window_ref = props.get("MaximumBatchingWindowInSeconds")
        if batch > 10:
            assert window_ref is not None, name
            window = P[window_ref["Ref"]] if isinstance(window_ref, dict) else {"Default": window_ref, "MinValue": 0}
            assert window["Default"] >= 1, name


def test_queue_visibility_timeout_covers_the_function_timeout() -> None:
    # CreateEventSourceMapping fails when the queue's visibility timeout is below the function's timeout
    # (Lambda Developer Guide, "Using Lambda with Amazon SQS" -> queue configuration; AWS advises 6x).
    for name, esm in of_type("AWS::Lambda::EventSourceMapping").items():
        queue = R[esm["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]]
        fn = R[esm["Properties"]["FunctionName"]["Ref"]]
        assert queue["Properties"]["VisibilityTimeout"] >= 6 * fn["Properties"]["Timeout"], name


def test_s3_notifications_reach_their_queues() -> None:
    # S3 validates a notification destination when the configuration is put: the queue policy must allow
    # s3.amazonaws.com to sqs:SendMessage, and for a queue encrypted with a customer managed key the key
    # policy must allow the S3 service kms:GenerateDataKey and kms:Decrypt (S3 User Guide, "Configuring a
    # bucket for notifications" / "Using SSE-KMS-encrypted destinations"). The bucket must depend on the
    # queue policy so the policy exists first.
    for bucket_name, bucket in of_type("AWS::S3::Bucket").items():
        config = bucket["Properties"].get("NotificationConfiguration", {})
        if "Fn::If" in config:  # S3 notifications or EventBridge: check the S3 notifications branch
            config = config["Fn::If"][2]
        for qc in config.get("QueueConfigurations", []):
            queue_name = qc["Queue"]["Fn::GetAtt"][0]
            policies = [
                (k, p)
                for k, p in of_type("AWS::SQS::QueuePolicy").items()
                if {"Ref": queue_name} in p["Properties"]["Queues"]
            ]
            assert policies, f"{queue_name} has no queue policy"
            allowed = [
                st
                for _, p in policies
                for st in p["Properties"]["PolicyDocument"]["Statement"]
                if st.get("Effect") == "Allow" and st.get("Principal") == {"Service": "s3.amazonaws.com"}
            ]
            assert any("sqs:SendMessage" in actions(st) for st in allowed), queue_name
            depends = bucket.get("DependsOn", [])
            depends = [depends] if isinstance(depends, str) else depends
            assert {k for k, _ in policies} & set(depends), bucket_name
            key_ref = R[queue_name]["Properties"].get("KmsMasterKeyId")
            if key_ref is not None and "alias/aws/" not in str(key_ref):
                key = R[key_ref["Ref"]]
                s3_statements = [
                    st
                    for st in key["Properties"]["KeyPolicy"]["Statement"]
                    if st.get("Effect") == "Allow" and st.get("Principal") == {"Service": "s3.amazonaws.com"}
                ]
                granted = {a for st in s3_statements for a in actions(st)}
                assert {"kms:GenerateDataKey", "kms:Decrypt"} <= granted, queue_name


def test_streaming_job_has_a_maintenance_window_and_a_bounded_timeout() -> None:
    # Glue restarts a streaming job at least every 7 days; without a maintenance window it picks the time
    # (Glue Developer Guide, "Maintenance windows for AWS Glue Streaming"). A streaming job's Timeout must
    # be at most 10080 minutes (7 days).
    job = R["GlueJob"]["Properties"]
    window = P[job["MaintenanceWindow"]["Ref"]]
    assert re.fullmatch(window["AllowedPattern"], window["Default"])
    assert re.fullmatch(r"^(Sun|Mon|Tue|Wed|Thu|Fri|Sat):([01]?[0-9]|2[0-3])$", window["Default"])
    timeout = P[job["Timeout"]["Ref"]]
    assert timeout["MaxValue"] <= 10080 and timeout["Default"] <= 10080


def test_job_runs_on_a_supported_glue_version_and_worker_type() -> None:
    job = R["GlueJob"]["Properties"]
    assert P["GlueVersion"]["AllowedValues"] == sorted(glue_runtimes())
    assert P["GlueVersion"]["Default"] in glue_runtimes()
    assert set(P["WorkerType"]["AllowedValues"]) <= set(STREAMING_WORKER_TYPES)
    assert P["WorkerType"]["Default"] in STREAMING_WORKER_TYPES
    assert job["Command"]["Name"] == "gluestreaming"


def test_no_job_argument_that_glue_5_ignores() -> None:
    # Glue 5 logs continuously on its own; --enable-continuous-cloudwatch-log does nothing there
    # (Glue Developer Guide, "Migrating AWS Glue for Spark jobs to AWS Glue version 5.0").
    assert "--enable-continuous-cloudwatch-log" not in R["GlueJob"]["Properties"]["DefaultArguments"]


def _rules(bucket: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = R[bucket]["Properties"]["LifecycleConfiguration"]["Rules"]
    return rules


def test_a_waiting_manifest_never_expires() -> None:
    # An outage longer than any expiration must not drop data: only archived (processed) manifests expire.
    for rule in _rules("ManifestBucket"):
        prefix = rule.get("Prefix", "")
        if "ExpirationInDays" in rule or "ExpirationDate" in rule:
            assert prefix.startswith("archive/"), rule["Id"]


@pytest.mark.parametrize("bucket", sorted(k for k, v in R.items() if v["Type"] == "AWS::S3::Bucket"))
def test_versioned_buckets_clean_noncurrent_versions_and_delete_markers(bucket: str) -> None:
    # In a versioned bucket a delete leaves a noncurrent version and a delete marker; both are kept
    # forever unless a lifecycle rule removes them (S3 User Guide, "Lifecycle configuration elements":
    # NoncurrentVersionExpiration, ExpiredObjectDeleteMarker, which cannot share a rule with an
    # expiration in days).
    props = R[bucket]["Properties"]
    if props.get("VersioningConfiguration", {}).get("Status") != "Enabled":
        pytest.skip("not versioned")
    whole = [r for r in _rules(bucket) if not r.get("Prefix")]
    assert any("NoncurrentVersionExpiration" in r for r in whole), bucket
    markers = [r for r in whole if r.get("ExpiredObjectDeleteMarker")]
    assert markers, bucket
    assert all("ExpirationInDays" not in r for r in markers), bucket


def test_deleted_staging_copies_do_not_linger() -> None:
    staging = [r for r in _rules("OutputBucket") if r.get("Prefix", "").startswith("data/_staging/")]
    days = [r["NoncurrentVersionExpiration"]["NoncurrentDays"] for r in staging if "NoncurrentVersionExpiration" in r]
    assert days and min(days) <= 1


def test_stateful_resources_declare_what_happens_on_delete_and_replace() -> None:
    # cfn-lint I3011: the KMS key must survive a replacement (it encrypts every bucket and queue).
    assert R["Key"]["UpdateReplacePolicy"] == "Retain"
    for kind in ("AWS::SQS::Queue", "AWS::Logs::LogGroup", "AWS::KMS::Key"):
        for name, res in of_type(kind).items():
            assert "DeletionPolicy" in res and "UpdateReplacePolicy" in res, name


def test_the_job_may_read_the_versions_its_events_name() -> None:
    # GetObject with a VersionId needs s3:GetObjectVersion (S3 API Reference, GetObject: Permissions);
    # the job reads exactly the version an event named (glue_processor/objects.py)
    statements = role_statements(R["GlueJob"]["Properties"]["Role"])
    landing = {"Fn::Sub": "${LandingBucket.Arn}/${LandingPrefix}*"}
    assert grants(statements, "s3:GetObjectVersion", landing)
    assert grants(statements, "s3:GetObject", landing)


def test_eventbridge_may_deliver_to_the_landing_queue() -> None:
    # With EventSource=eventbridge, the rule's target queue must allow events.amazonaws.com to send,
    # scoped to the rule (EventBridge User Guide, "Using resource-based policies for Amazon SQS targets")
    rule = R["LandingObjectCreated"]
    assert rule["Condition"] == "UseEventBridge"
    (target,) = rule["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["LandingQueue", "Arn"]}
    statements = R["LandingQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    conditional = [st["Fn::If"][1] for st in statements if "Fn::If" in st and st["Fn::If"][0] == "UseEventBridge"]
    (allow,) = conditional
    assert allow["Principal"] == {"Service": "events.amazonaws.com"} and allow["Action"] == "sqs:SendMessage"
    assert allow["Condition"]["ArnEquals"]["aws:SourceArn"] == {"Fn::GetAtt": ["LandingObjectCreated", "Arn"]}


# ---------------------------------------------------------------- the table


def _sub(value: Any) -> str:
    return value["Fn::Sub"] if isinstance(value, dict) and "Fn::Sub" in value else str(value)


def test_the_iceberg_table_is_declared_with_the_iceberg_input_and_the_jobs_location() -> None:
    # AWS::Glue::Table OpenTableFormatInput.IcebergInput (CloudFormation Template Reference): MetadataOperation
    # CREATE makes Glue write the first metadata file; the job's table location is <output_uri>/<table_name>.
    table = R["IcebergTable"]
    assert table["Condition"] == "IsIceberg"
    props = table["Properties"]
    assert props["OpenTableFormatInput"]["IcebergInput"] == {"MetadataOperation": "CREATE", "Version": "2"}
    args = R["GlueJob"]["Properties"]["DefaultArguments"]
    location = _sub(props["TableInput"]["StorageDescriptor"]["Location"])
    assert location == _sub(args["--output_uri"]) + "/${TableName}"
    assert args["--table_name"] == {"Ref": "TableName"} and props["TableInput"]["Name"] == {"Ref": "TableName"}
    assert args["--catalog"] == "glue" and args["--table_format"] == {"Ref": "TableFormat"}
    # timestamps are left for the job to add as timestamptz (a Glue `timestamp` column is Iceberg's
    # timestamp without zone, which the job's files do not match)
    types = {c["Name"]: c["Type"] for c in props["TableInput"]["StorageDescriptor"]["Columns"]}
    assert "timestamp" not in types.values()


def test_table_optimizers_run_on_the_table_with_their_own_scoped_role() -> None:
    # AWS Glue Developer Guide, "Table optimization prerequisites": the optimizer role needs S3 read/write/delete
    # on the table location, glue:GetTable/UpdateTable on the table, and logs under /aws-glue/iceberg*.
    optimizers = of_type("AWS::Glue::TableOptimizer")
    assert {o["Properties"]["Type"] for o in optimizers.values()} == {"compaction", "retention", "orphan_file_deletion"}
    for o in optimizers.values():
        assert o["Condition"] == "IsIceberg" and o["DependsOn"] == "IcebergTable"
        config = o["Properties"]["TableOptimizerConfiguration"]
        assert config["RoleArn"] == {"Fn::GetAtt": ["TableOptimizerRole", "Arn"]} and config["Enabled"] is True
    statements = role_statements({"Fn::GetAtt": ["TableOptimizerRole", "Arn"]})
    assert grants(statements, "s3:DeleteObject", {"Fn::Sub": "${OutputBucket.Arn}/data/${TableName}/*"})
    for st in statements:  # nothing beyond the table: no wildcard resource
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        assert "*" not in resources


def test_the_job_may_commit_to_its_table_and_no_other() -> None:
    statements = role_statements(R["GlueJob"]["Properties"]["Role"])
    table_arn = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:table/${DatabaseName}/${TableName}"
    glue = [st for st in statements if any(a.startswith("glue:") for a in actions(st))]
    assert len(glue) == 1
    assert {"glue:GetTable", "glue:UpdateTable"} <= set(actions(glue[0]))
    assert {"Fn::Sub": table_arn} in glue[0]["Resource"]
    assert all("*" not in _sub(r).rsplit(":", 1)[-1] for r in glue[0]["Resource"])


def test_the_hive_table_projects_its_partitions_where_the_job_writes_them() -> None:
    # Athena User Guide, "Partition projection": storage.location.template must contain ${dt}.
    params = R["HiveTable"]["Properties"]["TableInput"]["Parameters"]
    assert params["projection.enabled"] == "true" and params["projection.dt.format"] == "yyyy-MM-dd"
    assert _sub(params["storage.location.template"]).endswith("/data/dt=${!dt}")


def test_the_declared_schema_is_optional_and_readable_by_the_job() -> None:
    # Fn::If with AWS::NoValue removes the argument (CloudFormation User Guide, "Pseudo parameters: AWS::NoValue"),
    # so the default stack passes no --schema and the job keeps every column a string.
    arg = R["GlueJob"]["Properties"]["DefaultArguments"]["--schema"]
    assert arg == {"Fn::If": ["HasSchema", {"Ref": "SchemaUri"}, {"Ref": "AWS::NoValue"}]}
    statements = role_statements(R["GlueJob"]["Properties"]["Role"])
    read = [st for st in statements if st.get("Sid") == "ReadDeclaredSchema"]
    assert len(read) == 1 and read[0]["Resource"]["Fn::If"][0] == "HasSchema"


def test_the_job_may_read_every_artifact_it_starts_from() -> None:
    # Glue fetches the script, --extra-py-files and the S3 wheels of --additional-python-modules with
    # the job's role (AWS Glue Developer Guide, "Using Python libraries with AWS Glue"; "Setting up
    # IAM permissions for AWS Glue"): a missing grant fails the job at start, after a clean deploy.
    job = R["GlueJob"]["Properties"]
    statements = role_statements(job["Role"])
    wheels = [m for m in job["DefaultArguments"]["--additional-python-modules"]["Fn::Sub"].split(",") if "://" in m]
    locations = [job["Command"]["ScriptLocation"]["Fn::Sub"], job["DefaultArguments"]["--extra-py-files"]["Fn::Sub"]]
    assert len(wheels) == 1
    for uri in [*locations, *wheels]:
        assert uri.startswith("s3://${CodeBucket}/")
        arn = {"Fn::Sub": "arn:${AWS::Partition}:s3:::" + uri.removeprefix("s3://")}
        assert grants(statements, "s3:GetObject", arn), uri
