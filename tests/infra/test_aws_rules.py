"""AWS rules a first deploy depends on, each checked over the rendered template.

Each test names the rule and where AWS documents it. A rule CloudFormation only enforces at
deploy time (the resource fails to create, the stack rolls back) belongs here, so the next such
mistake fails ``make test`` instead of a user's first ``make deploy``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from glue_processor.settings import JobSettings
from infra.build import render
from infra.runtime import STREAMING_WORKER_TYPES, glue_runtimes, read_lock
from tests.helpers import policy_statements

T = render()
R: dict[str, Any] = T["Resources"]
P: dict[str, Any] = T["Parameters"]


def of_type(kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in R.items() if v["Type"] == kind}


def role_statements(role_ref: Any) -> list[dict[str, Any]]:
    role = R[role_ref["Fn::GetAtt"][0]]
    return [st for pol in role["Properties"]["Policies"] for st in policy_statements(pol["PolicyDocument"])]


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
        for listed in config.get("QueueConfigurations", []):
            qc = listed["Fn::If"][1] if "Fn::If" in listed else listed  # deletions: when a table retracts
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
    # the job reads exactly the version an event named (glue_processor/shared/objects.py)
    statements = role_statements(R["GlueJob"]["Properties"]["Role"])
    landing = {"Fn::Sub": "${LandingBucket.Arn}/*"}
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
    # no retention optimizer: the job is the one owner of snapshot expiry (glue_processor/table/expiry.py)
    assert {o["Properties"]["Type"] for o in optimizers.values()} == {"compaction", "orphan_file_deletion"}
    for o in optimizers.values():
        assert o["Condition"] == "IsIceberg" and o["DependsOn"] == "IcebergTable"
        config = o["Properties"]["TableOptimizerConfiguration"]
        assert config["RoleArn"] == {"Fn::GetAtt": ["TableOptimizerRole", "Arn"]} and config["Enabled"] is True
    statements = role_statements({"Fn::GetAtt": ["TableOptimizerRole", "Arn"]})
    # every table of the job lives under data/<table>/ (its own, the routing file's, the load history),
    # and the control plane gives the tables the job creates their optimizers with this role
    assert grants(statements, "s3:DeleteObject", {"Fn::Sub": "${OutputBucket.Arn}/data/*"})
    table = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:table/${DatabaseName}/*"
    assert grants(statements, "glue:UpdateTable", {"Fn::Sub": table})
    for st in statements:  # nothing beyond the job's tables: no wildcard resource
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        assert "*" not in resources


def test_the_job_may_commit_to_its_tables_and_no_other() -> None:
    statements = role_statements(R["GlueJob"]["Properties"]["Role"])
    tables = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:table/${DatabaseName}/"
    glue = [st for st in statements if any(a.startswith("glue:") for a in actions(st))]
    assert len(glue) == 1
    assert {"glue:GetTable", "glue:UpdateTable", "glue:CreateTable"} <= set(actions(glue[0]))
    # the data table and the load history (JobSettings.load_history_table's default), which the
    # job creates; the table parameter may not take the history's name
    resources = glue[0]["Resource"]
    (choice,) = [r["Fn::If"] for r in resources if isinstance(r, dict) and "Fn::If" in r]
    # its table; with a routing file the tables it names, which only the file knows: every table of its database
    assert choice == ["HasRoutes", {"Fn::Sub": tables + "*"}, {"Fn::Sub": tables + "${TableName}"}]
    assert {"Fn::Sub": tables + JobSettings.model_fields["load_history_table"].default} in resources
    pattern = re.compile(T["Parameters"]["TableName"]["AllowedPattern"])
    assert pattern.match("events") and not pattern.match("load_history") and pattern.match("load_history_2")
    fixed = [r for r in resources if not (isinstance(r, dict) and "Fn::If" in r)]
    assert all("*" not in _sub(r).rsplit(":", 1)[-1] for r in fixed)


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
    assert [r["Fn::If"][0] for r in read[0]["Resource"]] == ["HasSchema", "HasRoutes", "HasExpect"]
    assert len(read) == 1
    # and the routing file and the rules file, the same way
    routes = R["GlueJob"]["Properties"]["DefaultArguments"]["--routes"]
    assert routes == {"Fn::If": ["HasRoutes", {"Ref": "RoutesUri"}, {"Ref": "AWS::NoValue"}]}
    expect = R["GlueJob"]["Properties"]["DefaultArguments"]["--expect"]
    assert expect == {"Fn::If": ["HasExpect", {"Ref": "ExpectUri"}, {"Ref": "AWS::NoValue"}]}


def test_a_role_that_reads_an_object_which_may_be_missing_may_list_its_bucket_unconditionally() -> None:
    # S3 API Reference, GetObject, Permissions: "If the object that you request doesn't exist, the
    # error that Amazon S3 returns depends on whether you also have the s3:ListBucket permission":
    # 404 (NoSuchKey) with it, 403 (AccessDenied) without. A GetObject request carries no s3:prefix
    # (Amazon S3 User Guide, "Policy condition keys": it is a key of ListBucket requests), so a grant
    # conditioned on it does not count. The control plane's first tick reads a state no tick has
    # written yet (lambdas/control_plane/state.py takes NoSuchKey as "no state"; a 403 fails every
    # tick, and the job is never started); the job reads objects a producer may have deleted
    # (glue_processor/shared/objects.py quarantines NoSuchKey/NoSuchVersion; a 403 fails the batch).
    cases = {
        "ControlPlane": {"Fn::GetAtt": ["ArtifactsBucket", "Arn"]},
        "GlueJob": {"Fn::GetAtt": ["LandingBucket", "Arn"]},
    }
    for resource, bucket in cases.items():
        listing = [
            st
            for st in role_statements(R[resource]["Properties"]["Role"])
            if st["Effect"] == "Allow" and "s3:ListBucket" in actions(st) and st["Resource"] == bucket
        ]
        assert listing, f"{resource}: no s3:ListBucket on {bucket}"
        assert any("Condition" not in st for st in listing), f"{resource}: s3:ListBucket on {bucket} is conditioned"


def test_the_job_may_read_every_artifact_it_starts_from() -> None:
    # Glue fetches the script, --extra-py-files and the S3 wheels of --additional-python-modules with
    # the job's role (AWS Glue Developer Guide, "Using Python libraries with AWS Glue"; "Setting up
    # IAM permissions for AWS Glue"): a missing grant fails the job at start, after a clean deploy.
    job = R["GlueJob"]["Properties"]
    statements = role_statements(job["Role"])
    wheels = [m for m in job["DefaultArguments"]["--additional-python-modules"]["Fn::Sub"].split(",") if "://" in m]
    locations = [job["Command"]["ScriptLocation"]["Fn::Sub"], job["DefaultArguments"]["--extra-py-files"]["Fn::Sub"]]
    assert len(wheels) == len(read_lock()) + 1  # the locked wheelhouse and the native wheel
    for uri in [*locations, *wheels]:
        assert uri.startswith("s3://${CodeBucket}/")
        arn = {"Fn::Sub": "arn:${AWS::Partition}:s3:::" + uri.removeprefix("s3://")}
        wildcard = {"Fn::Sub": "arn:${AWS::Partition}:s3:::" + uri.removeprefix("s3://").rsplit("/", 1)[0] + "/*"}
        assert grants(statements, "s3:GetObject", arn) or grants(statements, "s3:GetObject", wildcard), uri


# ---------------------------------------------------------------- a year on AWS (issue 23)


def test_every_bucket_name_fits_63_characters_with_the_longest_project_name_and_region() -> None:
    # S3 bucket names are 3-63 characters (S3 User Guide, "General purpose bucket naming rules"); the
    # longest region code botocore knows, and a 12-digit account, with the longest ProjectName allowed
    import botocore.session

    endpoints = botocore.session.get_session().get_data("endpoints")
    region = max((r for p in endpoints["partitions"] for r in p["regions"]), key=len)
    longest = "p" * int(re.fullmatch(r"\^\[a-z\]\[a-z0-9-\]\{2,(\d+)\}\$", P["ProjectName"]["AllowedPattern"])[1]) + "p"
    for name, bucket in of_type("AWS::S3::Bucket").items():
        sub = _sub(bucket["Properties"]["BucketName"])
        rendered = sub.replace("${ProjectName}", longest).replace("${AWS::AccountId}", "1" * 12)
        rendered = rendered.replace("${AWS::Region}", region)
        assert len(rendered) <= 63, (name, rendered)


def test_the_batching_window_can_never_be_zero_when_batches_exceed_ten() -> None:
    # "When you set BatchSize to a value greater than 10, you must set MaximumBatchingWindowInSeconds to at
    # least 1" (Lambda Developer Guide, "Using Lambda with Amazon SQS"): any allowed value must do
    assert P["SqsBatchSize"]["MaxValue"] > 10
    assert P["SqsBatchingWindowSeconds"]["MinValue"] >= 1


def test_the_job_timeout_is_under_glues_seven_day_limit() -> None:
    # "Jobs must have timeout values less than 7 days or 10080 minutes. Otherwise, the jobs will throw an
    # exception" (Glue API, JobRun.Timeout); a streaming run with a timeout under 7 days is not restarted
    # for maintenance (Glue Developer Guide, "Maintenance windows for AWS Glue Streaming")
    timeout = P["JobTimeoutMinutes"]
    assert timeout["MaxValue"] < 10080 and timeout["Default"] < 10080


def test_eventbridge_can_deliver_to_the_encrypted_queue_and_keeps_what_it_cannot() -> None:
    # An SQS target encrypted with a customer managed key needs the key policy to let events.amazonaws.com
    # use it (SQS Developer Guide, "Configure KMS permissions for AWS services"); a target without a
    # dead-letter queue drops events once retries end (EventBridge User Guide, "Event retry policy and
    # using dead-letter queues"), and the DLQ's policy must let the rule send
    statements = R["Key"]["Properties"]["KeyPolicy"]["Statement"]
    (events,) = [st["Fn::If"][1] for st in statements if "Fn::If" in st and st["Fn::If"][0] == "UseEventBridge"]
    assert events["Principal"] == {"Service": "events.amazonaws.com"}
    assert {"kms:GenerateDataKey", "kms:Decrypt"} <= set(actions(events))
    (target,) = R["LandingObjectCreated"]["Properties"]["Targets"]
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": ["EventDeliveryDeadLetterQueue", "Arn"]}}
    assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == 86400
    dlq = R["EventDeliveryDeadLetterQueue"]
    assert dlq["Condition"] == "UseEventBridge" and dlq["Properties"]["KmsMasterKeyId"] == {"Ref": "Key"}
    (allow,) = R["EventDeliveryDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"} and allow["Action"] == "sqs:SendMessage"
    assert allow["Condition"]["ArnEquals"]["aws:SourceArn"] == {"Fn::GetAtt": ["LandingObjectCreated", "Arn"]}


def test_a_rolled_back_first_create_leaves_no_catalog_behind_and_a_delete_keeps_it() -> None:
    # DeletionPolicy RetainExceptOnCreate: "retain the resource on stack deletion, but delete it if the
    # stack creation rolls back" (CloudFormation User Guide, "DeletionPolicy attribute"): a failed first
    # deploy can be retried without "already exists"; `make destroy DROP_CATALOG=1` removes what is kept
    for name in ("GlueDatabase", "IcebergTable", "HiveTable"):
        assert R[name]["DeletionPolicy"] == "RetainExceptOnCreate", name
        assert R[name]["UpdateReplacePolicy"] == "Retain", name


def resolve(value: Any, params: dict[str, str]) -> Any:
    """What CloudFormation would send for ``value`` given the parameters (Ref, Fn::Sub, GetAtt)."""
    if isinstance(value, dict):
        if "Ref" in value:
            name = value["Ref"]
            return params.get(name, f"<{name}>")
        if "Fn::Sub" in value:
            text = value["Fn::Sub"]
            return re.sub(r"\$\{([^}!]+)\}", lambda m: str(params.get(m[1], f"<{m[1]}>")), text)
        if "Fn::GetAtt" in value:
            return f"<{'.'.join(value['Fn::GetAtt'])}>"
        return {k: resolve(v, params) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, params) for v in value]
    return value


def test_no_parameter_but_the_catalog_names_changes_what_cloudformation_sends_for_the_table() -> None:
    # Given two stacks' parameters that differ in everything but the project, database and table names
    first = {k: str(v.get("Default", "")) for k, v in P.items()}
    first.update({"ProjectName": "ingest", "CodeBucket": "code-a", "JobScriptKey": "a/main.py"})
    second = {
        **first,
        "CodeBucket": "code-b",
        "JobScriptKey": "b/main.py",
        "JobPackageKey": "b/job.zip",
        "WorkerType": "G.2X",
        "MaxWorkers": "40",
        "MaxColumns": "100",
        "PartitionBy": "day(ts)",
        "SchemaUri": "s3://b/schema.json",
        "SnapshotRetentionHours": "12",
        "OrphanFileRetentionDays": "7",
        "TriggerIntervalSeconds": "60",
        "EventSource": "eventbridge",
        "GlueVersion": "5.0",
        "AlarmEmail": "ops@example.com",
    }
    # Then the table and the database resolve to the same properties: CloudFormation has nothing to
    # update on them (an update would replace the table's metadata: cloudformation-coverage-roadmap#1919)
    for name in ("GlueDatabase", "IcebergTable", "HiveTable"):
        assert resolve(R[name]["Properties"], first) == resolve(R[name]["Properties"], second), name


def test_orphan_file_deletion_covers_every_prefix_the_job_writes_under_the_table() -> None:
    # The orphan-file optimizer deletes files under its Location that no snapshot references, older than
    # the retention (Glue Developer Guide, "Deleting orphan files"; API IcebergOrphanFileDeletionConfiguration:
    # "Specifies a directory in which to look for files (defaults to the table's location)"). Batches write
    # under <table>/ingest/, compaction under <table>/data/, commits under <table>/metadata/: its Location is
    # the table's own, and the job's bookkeeping (<output>/_commits, _deferred, _catalog) is not under it
    props = R["IcebergTable"]["Properties"]
    table_location = _sub(props["TableInput"]["StorageDescriptor"]["Location"])
    config = R["OrphanFileOptimizer"]["Properties"]["TableOptimizerConfiguration"]
    location = _sub(config["OrphanFileDeletionConfiguration"]["IcebergConfiguration"]["Location"])
    output = _sub(R["GlueJob"]["Properties"]["DefaultArguments"]["--output_uri"])
    assert location == table_location == output + "/${TableName}"


def test_the_job_expires_snapshots_with_the_stack_s_retention() -> None:
    # one owner of expiry: the stack's SnapshotRetentionHours is the job's --snapshot_retention_hours, within
    # the bounds the job accepts, and no retention optimizer expires the table on another clock
    args = R["GlueJob"]["Properties"]["DefaultArguments"]
    assert args["--snapshot_retention_hours"] == {"Ref": "SnapshotRetentionHours"}
    field = JobSettings.model_fields["snapshot_retention_hours"]
    bounds = {type(m).__name__: m for m in field.metadata}
    parameter = P["SnapshotRetentionHours"]
    # (its bounds are the job's field's, as a whole-number pattern: infra/parameters.py)
    low, high = bounds["Ge"].ge, bounds["Le"].le
    allowed = [n for n in range(0, high + 2) if re.fullmatch(parameter["AllowedPattern"], str(n))]
    assert (allowed[0], allowed[-1], len(allowed)) == (low, high, high - low + 1)
    assert parameter["Default"] == str(field.default)
    assert "SnapshotRetentionDays" not in P and not [
        o for o in of_type("AWS::Glue::TableOptimizer").values() if o["Properties"]["Type"] == "retention"
    ]


def test_the_control_plane_watches_the_table_optimizers() -> None:
    env = R["ControlPlane"]["Properties"]["Environment"]["Variables"]
    assert env["CATALOG_ID"] == {"Ref": "AWS::AccountId"} and "TABLE_NAME" in env
    statements = role_statements(R["ControlPlane"]["Properties"]["Role"])
    # its table and the tables the job creates (the routing file's, the load history): every table of the database
    table = {"Fn::Sub": "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:table/${DatabaseName}/*"}
    for action in ("glue:BatchGetTableOptimizer", "glue:CreateTableOptimizer", "glue:GetTable"):
        assert grants(statements, action, table), action


def test_the_job_may_create_its_database_when_it_is_missing() -> None:
    # pyiceberg's GlueCatalog.create_namespace calls CreateDatabase (ensure_table's fallback)
    statements = role_statements(R["GlueJob"]["Properties"]["Role"])
    database = {"Fn::Sub": "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:database/${DatabaseName}"}
    assert grants(statements, "glue:CreateDatabase", database)


def test_the_job_may_read_its_locked_wheelhouse() -> None:
    statements = role_statements(R["GlueJob"]["Properties"]["Role"])
    assert grants(
        statements, "s3:GetObject", {"Fn::Sub": "arn:${AWS::Partition}:s3:::${CodeBucket}/${JobWheelhousePrefix}/*"}
    )


def test_a_run_s_end_ticks_the_control_plane_at_once() -> None:
    # AWS Glue Developer Guide, "Automating AWS Glue with EventBridge": Glue sends "Glue Job State
    # Change" events (source aws.glue) naming detail.jobName, with detail.state SUCCEEDED, FAILED,
    # TIMEOUT or STOPPED, to the default event bus. A resize (stop, then start) waits for no schedule.
    rule = R["ControlPlaneOnJobEnd"]["Properties"]
    pattern = rule["EventPattern"]
    assert pattern["source"] == ["aws.glue"] and pattern["detail-type"] == ["Glue Job State Change"]
    assert set(pattern["detail"]["state"]) == {"SUCCEEDED", "FAILED", "TIMEOUT", "STOPPED"}
    assert pattern["detail"]["jobName"] == [R["GlueJob"]["Properties"]["Name"]]
    assert "EventBusName" not in rule  # the default bus, where Glue's events go
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["ControlPlane", "Arn"]} and target["Input"] == '{"command": "tick"}'
    permission = R["ControlPlaneOnJobEndPermission"]["Properties"]
    assert permission["Principal"] == "events.amazonaws.com"
    assert permission["SourceArn"] == {"Fn::GetAtt": ["ControlPlaneOnJobEnd", "Arn"]}


def test_the_manifest_lambda_s_surge_signal_reaches_this_stack_s_control_plane_only() -> None:
    # Amazon EventBridge User Guide: PutEvents sends to the default bus unless EventBusName says
    # otherwise, and "aws." sources are reserved for AWS services; the "events:source" condition key
    # limits which sources a principal may put ("Using IAM policy conditions in Amazon EventBridge").
    # A target's RetryPolicy takes MaximumEventAgeInSeconds 60..86400 ("RetryPolicy", API Reference).
    from contracts.surge import DETAIL_TYPE, SOURCE

    assert not SOURCE.startswith("aws.")
    rule = R["ControlPlaneOnSurge"]["Properties"]
    assert "EventBusName" not in rule
    pattern = rule["EventPattern"]
    assert pattern["source"] == [SOURCE] and pattern["detail-type"] == [DETAIL_TYPE]
    lam = R["ManifestLambda"]["Properties"]["Environment"]["Variables"]
    plane = R["ControlPlane"]["Properties"]["Environment"]["Variables"]
    # the manifest prefix the Lambda writes and names in the signal, the one the rule matches and the
    # control plane lists
    assert plane["MANIFEST_BUCKET"] == lam["MANIFEST_BUCKET"] == {"Ref": "ManifestBucket"}
    assert plane["MANIFEST_PREFIX"] == lam["MANIFEST_PREFIX"] == "manifests/"
    assert pattern["detail"]["manifest_uri"] == [{"Fn::Sub": "s3://${ManifestBucket}/manifests/"}]
    assert lam["SURGE_BYTES"] == {"Ref": "SurgeBytes"} and re.fullmatch(P["SurgeBytes"]["AllowedPattern"], "0")
    (target,) = rule["Targets"]
    # the event as it is (the handler reads its source and detail; a control plane from before the
    # signal, mid-deploy, takes an event without "command" for a tick)
    assert target["Arn"] == {"Fn::GetAtt": ["ControlPlane", "Arn"]} and "Input" not in target
    assert "InputTransformer" not in target and "InputPath" not in target
    assert 60 <= target["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 86400
    permission = R["ControlPlaneOnSurgePermission"]["Properties"]
    assert permission["Principal"] == "events.amazonaws.com"
    assert permission["SourceArn"] == {"Fn::GetAtt": ["ControlPlaneOnSurge", "Arn"]}
    # the Lambda may put its own source on the default bus, and nothing else
    (put,) = [
        st for st in role_statements(R["ManifestLambda"]["Properties"]["Role"]) if "events:PutEvents" in actions(st)
    ]
    assert put["Resource"]["Fn::Sub"].endswith(":event-bus/default")
    assert put["Condition"] == {"StringEquals": {"events:source": SOURCE}}
    # the control plane may list the manifest prefix (ListObjectsV2 is authorized as s3:ListBucket
    # with the s3:prefix condition key: Amazon S3 User Guide, "Policy condition keys")
    listing = [
        st for st in role_statements(R["ControlPlane"]["Properties"]["Role"]) if st.get("Sid") == "ListManifests"
    ]
    assert listing and listing[0]["Resource"] == {"Fn::GetAtt": ["ManifestBucket", "Arn"]}
    assert listing[0]["Condition"] == {"StringEquals": {"s3:prefix": plane["MANIFEST_PREFIX"]}}


# ---------------------------------------------------------------- first deploy, first year (issue 42)


def test_the_job_may_abort_the_multipart_uploads_it_starts_wherever_it_writes() -> None:
    # S3 API Reference, AbortMultipartUpload, Permissions (S3 User Guide, "Multipart upload API and
    # permissions"): aborting needs s3:AbortMultipartUpload, which s3:PutObject does not include.
    # The job uploads a file of SINGLE_PUT_BYTES or more in parts (boto3's upload_file, which aborts
    # the upload when a part fails: glue_processor/shared/objects.py), and Spark's file systems do too;
    # without the grant a failed upload's abort is AccessDenied and its parts stay, billed, until the
    # bucket's lifecycle rule, with the abort's error in place of the upload's.
    from glue_processor.shared.objects import SINGLE_PUT_BYTES

    assert SINGLE_PUT_BYTES <= 8 * 1024 * 1024  # the data files (~128 MB) are uploaded in parts
    statements = role_statements(R["GlueJob"]["Properties"]["Role"])
    written = [
        r
        for st in statements
        if st["Effect"] == "Allow" and "s3:PutObject" in actions(st)
        for r in (st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]])
    ]
    assert {"Fn::Sub": "${OutputBucket.Arn}/data/*"} in written
    for resource in written:
        assert grants(statements, "s3:AbortMultipartUpload", resource), resource


def test_the_job_may_have_s3_copy_its_staged_parts_into_the_files_it_writes() -> None:
    # S3 API Reference, UploadPartCopy, Permissions: the caller needs s3:GetObject on the source
    # object and s3:PutObject on the destination. The write stage composes a file from its parts'
    # ranges with UploadPartCopy (glue_processor/write/compose.py); the parts are staged under the
    # batch's staging directory of --output_uri (BatchCommitter.staging_uri), the files written there.
    from contracts.layout import STAGING_DIR

    statements = role_statements(R["GlueJob"]["Properties"]["Role"])
    output = R["GlueJob"]["Properties"]["DefaultArguments"]["--output_uri"]
    assert output == {"Fn::Sub": "s3://${OutputBucket}/data"}
    assert not STAGING_DIR.startswith("/")  # the staging directory is inside the output's prefix
    data = {"Fn::Sub": "${OutputBucket.Arn}/data/*"}
    assert grants(statements, "s3:GetObject", data)  # the parts, copied from
    assert grants(statements, "s3:PutObject", data)  # the file, copied into
    assert grants(statements, "s3:AbortMultipartUpload", data)  # a failed composition, aborted
