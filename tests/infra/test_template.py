"""The template's wiring, checked over the parsed template (not through moto's CloudFormation)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contracts import metrics as M
from infra.build import render
from infra.observability import DIMENSION_VALUES

ROOT = Path(__file__).resolve().parents[2]
T = render()
from tests.helpers import policy_statements  # noqa: E402

R = T["Resources"]
# Actions that support no resource-level permissions; they may use "*" (with a condition where one exists).
UNSCOPED_OK = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "cloudwatch:GetMetricData",
    "cloudwatch:PutMetricData",
}


def of_type(kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in R.items() if v["Type"] == kind}


def test_bucket_notifications_go_to_the_queue_with_prefix_and_suffix_filters() -> None:
    listed = R["LandingBucket"]["Properties"]["NotificationConfiguration"]["Fn::If"][2]["QueueConfigurations"]
    configs = [c for c in listed if "Fn::If" not in c]
    # deletions are subscribed only when a table retracts them, with the same filters; never lifecycle
    # expirations (s3:LifecycleExpiration:*: S3 User Guide, "Event notification types")
    removed = [c["Fn::If"] for c in listed if "Fn::If" in c]
    assert {(cond, no["Ref"]) for cond, _, no in removed} == {("SubscribeDeletions", "AWS::NoValue")}
    assert [r["Filter"] for _, r, _ in removed] == [c["Filter"] for c in configs]
    assert {c["Event"] for c in configs} == {"s3:ObjectCreated:*"} and {r["Event"] for _, r, _ in removed} == {
        "s3:ObjectRemoved:*"
    }
    assert {c["Queue"]["Fn::GetAtt"][0] for c in configs} == {"LandingQueue"}
    suffixes = set()
    for c in configs:
        rules = {r["Name"]: r["Value"] for r in c["Filter"]["S3Key"]["Rules"]}
        assert rules["prefix"] == {"Ref": "LandingPrefix"}
        suffixes.add(rules["suffix"])
    assert suffixes == {".json", ".ndjson", ".jsonl", ".gz"}
    assert "LandingQueuePolicy" in R["LandingBucket"]["DependsOn"]


def test_queue_policy_admits_only_the_landing_bucket() -> None:
    (allow,) = [
        s for s in R["LandingQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"] if s.get("Effect") == "Allow"
    ]
    assert allow["Principal"] == {"Service": "s3.amazonaws.com"} and allow["Action"] == "sqs:SendMessage"
    source_arn = allow["Condition"]["ArnLike"]["aws:SourceArn"]["Fn::Sub"]
    landing_name = R["LandingBucket"]["Properties"]["BucketName"]["Fn::Sub"]
    assert source_arn.endswith(":::" + landing_name)
    assert allow["Condition"]["StringEquals"]["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}


def test_event_source_mapping_for_large_batches_with_partial_failures() -> None:
    esm = R["ManifestLambdaEvents"]["Properties"]
    assert esm["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    params = T["Parameters"]
    assert params["SqsBatchSize"]["Default"] >= 100 and params["SqsBatchingWindowSeconds"]["Default"] > 0
    assert esm["BatchSize"] == {"Ref": "SqsBatchSize"}


def test_visibility_timeout_is_at_least_six_lambda_timeouts() -> None:
    assert R["LandingQueue"]["Properties"]["VisibilityTimeout"] >= 6 * R["ManifestLambda"]["Properties"]["Timeout"]
    redrive = R["LandingQueue"]["Properties"]["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": ["LandingDeadLetterQueue", "Arn"]}


def test_buckets_block_public_access_encrypt_and_require_tls() -> None:
    buckets = of_type("AWS::S3::Bucket")
    assert len(buckets) == 5
    for name, bucket in buckets.items():
        props = bucket["Properties"]
        assert all(props["PublicAccessBlockConfiguration"].values()), name
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"], name
        assert props["LifecycleConfiguration"]["Rules"], name
    policies = {p["Properties"]["Bucket"]["Ref"] for p in of_type("AWS::S3::BucketPolicy").values()}
    tls = [
        s
        for p in of_type("AWS::S3::BucketPolicy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
    ]
    assert policies == set(buckets) and len(tls) == len(buckets)


def test_every_iam_statement_is_scoped() -> None:
    for role_name, role in of_type("AWS::IAM::Role").items():
        for policy in role["Properties"]["Policies"]:
            for st in policy_statements(policy["PolicyDocument"]):
                actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
                assert all("*" not in a for a in actions), (role_name, st["Sid"])
                if st["Resource"] == "*":
                    assert set(actions) <= UNSCOPED_OK, (role_name, st["Sid"])
                    if "cloudwatch:PutMetricData" in actions:
                        assert "cloudwatch:namespace" in st["Condition"]["StringEquals"]


def test_glue_job_arguments_and_settings_agree_with_the_job() -> None:
    from glue_processor.settings import JobSettings

    job = R["GlueJob"]["Properties"]
    ours = {k[2:] for k in job["DefaultArguments"] if re.match(r"^--[a-z][a-z0-9_]*$", k)}
    names = {f.alias or name for name, f in JobSettings.model_fields.items()}  # --schema is schema_uri's alias
    assert ours <= names, ours - names
    assert job["Command"]["Name"] == "gluestreaming"
    for flag in ("--enable-metrics", "--enable-spark-ui"):
        assert job["DefaultArguments"][flag] == "true"
    assert job["DefaultArguments"]["--job_name"] == {"Fn::Sub": DIMENSION_VALUES["JobName"]}
    assert job["DefaultArguments"]["--query_name"] == {"Ref": "QueryName"}


def _dashboard() -> dict[str, Any]:
    body = R["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    sla = T["Parameters"]["LatencySlaSeconds"]["Default"]  # the dashboard as a stack at the defaults draws it
    return json.loads(body.replace("${LatencySlaSeconds}", str(sla)))


def test_dashboard_names_only_emitted_metrics_with_their_dimensions() -> None:
    ours = []
    for w in _dashboard()["widgets"]:
        for m in w["properties"]["metrics"]:
            if m[0] == "${MetricsNamespace}":
                ours.append(m)
                metric = M.BY_NAME[m[1]]  # KeyError: the dashboard names a metric the code does not emit
                dims = dict(zip(m[2:-1:2], m[3:-1:2], strict=True))
                assert tuple(sorted(dims)) == tuple(sorted(metric.dimensions)), m
    shown = {m[1] for m in ours}
    panels = {
        "InputRecordsPerSecond",
        "ProcessedRecordsPerSecond",
        "BatchDuration",
        "TriggerInterval",
        "AddBatchDuration",
        "WalCommitDuration",
        "BacklogManifests",
        "OldestBacklogAge",
        "EndToEndLatencyMax",
        "EndToEndLatencyP95",
        "RecordsIn",
        "BadRecords",
        "ParquetAvgFileSize",
        "CurrentWorkers",
        "DesiredWorkers",
    }
    assert panels <= shown, panels - shown


def test_alarm_dimensions_equal_the_emitted_ones() -> None:
    alarms = of_type("AWS::CloudWatch::Alarm")
    custom = 0
    for name, alarm in alarms.items():
        props = alarm["Properties"]
        queries = [q["MetricStat"]["Metric"] for q in props.get("Metrics", []) if "MetricStat" in q]
        if "MetricName" in props:
            queries.append(props)
        for q in queries:
            if q["Namespace"] != {"Ref": "MetricsNamespace"}:
                continue
            custom += 1
            metric = M.BY_NAME[q["MetricName"]]
            assert [d["Name"] for d in q["Dimensions"]] == list(metric.dimensions), name
    assert custom >= 7
    needed = {
        "UtilizationAtCapacity",
        "BacklogAgeOverSla",
        "NoRecordsWhileFilesArrive",
        "DeadLetterQueueNotEmpty",
        "JobNotRunning",
        "ManifestLambdaErrors",
        "ControlPlaneErrors",
    }
    assert needed <= set(alarms)


def test_every_way_an_object_is_not_loaded_is_alarmed() -> None:
    # "Nothing is silently lost": an object quarantined, ignored, refused, or whose event waits
    # unhandled raises an alarm, not only a log line or a dashboard figure
    alarms = of_type("AWS::CloudWatch::Alarm")
    by_metric = {a["Properties"].get("MetricName"): a["Properties"] for a in alarms.values()}
    for metric in (M.MISSING_OBJECTS, M.UNREADABLE_OBJECTS, M.OBJECTS_IGNORED, M.REFUSED_OBJECTS):
        props = by_metric[metric.name]
        assert (props["Statistic"], props["Threshold"], props["ComparisonOperator"]) == (
            "Sum",
            0,
            "GreaterThanThreshold",
        ), metric.name
        assert props["AlarmActions"] == [{"Ref": "AlarmTopic"}]
    # events waiting on the landing queue (the manifest Lambda disabled or starved): no manifest is
    # written, so no job metric moves, and SQS deletes a message after its retention period
    # (ApproximateAgeOfOldestMessage: Amazon SQS Developer Guide, "Available CloudWatch metrics")
    waiting = alarms["LandingEventsWaiting"]["Properties"]
    assert (waiting["Namespace"], waiting["MetricName"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessage")
    assert waiting["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["LandingQueue", "QueueName"]}}]
    assert waiting["Threshold"] == {"Ref": "LatencySlaSeconds"}
    assert waiting["Period"] * waiting["EvaluationPeriods"] < R["LandingQueue"]["Properties"]["MessageRetentionPeriod"]


def test_cfn_lint_reports_nothing(tmp_path: Path) -> None:
    path = tmp_path / "template.json"
    path.write_text(json.dumps(T))
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    # -c I: informational checks too (explicit deletion policies, retention periods)
    out = subprocess.run([str(cfn_lint), "-c", "I", "--", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_checkov_reports_no_failed_check(tmp_path: Path) -> None:
    checkov = ROOT / ".venv-tools" / "bin" / "checkov"
    assert checkov.exists(), "checkov is installed by `make setup` into .venv-tools"
    path = tmp_path / "template.json"
    path.write_text(json.dumps(T))
    out = subprocess.run(
        [str(checkov), "-f", str(path), "--framework", "cloudformation", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    summary = json.loads(out.stdout)["summary"]
    assert summary["failed"] == 0 and summary["parsing_errors"] == 0, out.stdout[-3000:]
    assert summary["passed"] > 50


@pytest.mark.parametrize("key", ["ManifestLambda", "ControlPlane"])
def test_lambda_handlers_exist(key: str) -> None:
    import importlib

    module, func = R[key]["Properties"]["Handler"].rsplit(".", 1)
    assert callable(getattr(importlib.import_module(module), func))


def test_the_top_tables_widgets_query_only_metrics_published_per_table_for_this_job() -> None:
    # Metrics Insights (CloudWatch User Guide, "Metrics Insights query components and syntax"): SCHEMA(...)
    # keeps the series with exactly those dimensions, GROUP BY makes one line per table
    queries = [
        m[0]["expression"]
        for w in _dashboard()["widgets"]
        for m in w["properties"]["metrics"]
        if isinstance(m[0], dict) and "expression" in m[0]
    ]
    assert len(queries) >= 5
    rules = [q for q in queries if '"Rule"' in q]
    assert rules == [
        'SELECT SUM("RuleViolations") FROM SCHEMA("${MetricsNamespace}", "JobName", "QueryName", "Table", "Rule") '
        "WHERE \"JobName\" = '${ProjectName}-streaming' AND \"QueryName\" = '${QueryName}' "
        'GROUP BY "Table", "Rule" ORDER BY SUM() DESC LIMIT 10'
    ]
    assert M.RULE_VIOLATIONS.per_rule  # the code publishes it with the Table and Rule dimensions
    for q in (q for q in queries if q not in rules):
        found = re.match(
            r'^SELECT (SUM|MAX)\("(\w+)"\) FROM SCHEMA\("\$\{MetricsNamespace\}", "JobName", "QueryName", "Table"\) '
            r"WHERE \"JobName\" = '\$\{ProjectName\}-streaming' AND \"QueryName\" = '\$\{QueryName\}' "
            r'GROUP BY "Table" ORDER BY (SUM|MAX)\(\) DESC LIMIT 10$',
            q,
        )
        assert found, q
        assert M.BY_NAME[found[2]].per_table, q  # the code publishes it with the Table dimension
    assert "DeferredPublications" in of_type("AWS::CloudWatch::Alarm")


def test_a_routing_file_reaches_the_job_and_the_control_plane_and_widens_only_their_table_scope() -> None:
    job = R["GlueJob"]["Properties"]["DefaultArguments"]
    assert job["--routes"] == {"Fn::If": ["HasRoutes", {"Ref": "RoutesUri"}, {"Ref": "AWS::NoValue"}]}
    env = R["ControlPlane"]["Properties"]["Environment"]["Variables"]
    assert env["ROUTES_URI"] == {"Fn::If": ["HasRoutes", {"Ref": "RoutesUri"}, {"Ref": "AWS::NoValue"}]}
    assert env["OPTIMIZER_ROLE_ARN"]["Fn::If"][1] == {"Fn::GetAtt": ["TableOptimizerRole", "Arn"]}

    def statement(role: str, sid: str) -> dict[str, Any]:
        (policy,) = R[role]["Properties"]["Policies"]
        return next(s for s in policy_statements(policy["PolicyDocument"]) if s["Sid"] == sid)

    # the job may create and commit to every table of its database only with a routing file
    tables = statement("GlueJobRole", "CommitToTheTable")["Resource"]
    routed = next(r for r in tables if isinstance(r, dict) and "Fn::If" in r)["Fn::If"]
    assert routed[0] == "HasRoutes" and routed[1]["Fn::Sub"].endswith(":table/${DatabaseName}/*")
    assert routed[2]["Fn::Sub"].endswith(":table/${DatabaseName}/${TableName}")
    # the control plane passes the optimizers' role to Glue only (IAM User Guide, "Granting a user
    # permissions to pass a role to an AWS service": iam:PassedToService)
    passing = statement("ControlPlaneRole", "PassTheOptimizerRole")
    assert passing["Action"] == "iam:PassRole"
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "glue.amazonaws.com"}}
    assert "glue:CreateTableOptimizer" in statement("ControlPlaneRole", "KeepTheTableOptimizers")["Action"]


def test_a_routing_file_with_the_one_table_settings_is_refused_before_the_stack_changes() -> None:
    # CloudFormation template rules (User Guide, "Rules"): a RuleCondition, and Assertions it checks
    # against the parameters before creating or updating anything
    rule = T["Rules"]["RoutesNameEachTablesColumnsAndPartitions"]
    assert rule["RuleCondition"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "RoutesUri"}, ""]}]}
    refs = json.dumps(rule["Assertions"])
    assert '"SchemaUri"' in refs and '"PartitionBy"' in refs and '"TableFormat"' in refs


def test_rows_moved_past_the_partition_limit_are_alarmed() -> None:
    # a batch past --partition_limit_per_batch moves the rows of its smallest partitions into the null
    # partition: nothing is lost, but a reader filtering on the partition column no longer finds them
    alarms = of_type("AWS::CloudWatch::Alarm")
    (props,) = [
        a["Properties"]
        for a in alarms.values()
        if a["Properties"].get("MetricName") == M.PARTITION_OVERFLOW_RECORDS.name
    ]
    assert (props["Statistic"], props["Threshold"], props["ComparisonOperator"]) == ("Sum", 0, "GreaterThanThreshold")
    assert props["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def test_the_job_may_delete_landing_objects_only_when_after_load_asks() -> None:
    # after_load archive/delete (docs/mirror.md) needs the landing bucket's DeleteObject(Version) and,
    # for the archive, PutObject; with the default (keep) the job never gets them
    (policy,) = R["GlueJobRole"]["Properties"]["Policies"]
    conditional = [st["Fn::If"] for st in policy["PolicyDocument"]["Statement"] if "Fn::If" in st]
    (cleans,) = [(c, st) for c, st, _ in conditional if st["Sid"] == "CleanLanding"]
    assert cleans[0] == "CleansLanding"
    assert T["Conditions"]["CleansLanding"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "AfterLoad"}, "keep"]}]}
    assert T["Parameters"]["AfterLoad"]["Default"] == "keep"
    assert cleans[1]["Resource"] == {"Fn::Sub": "${LandingBucket.Arn}/*"}
    assert {"s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObject"} <= set(cleans[1]["Action"])
    # and every delete an unconditional statement grants on the landing bucket: none
    others = [st for st in policy["PolicyDocument"]["Statement"] if "Fn::If" not in st]
    landing = [st for st in others if "LandingBucket" in json.dumps(st["Resource"])]
    assert not any(a.startswith("s3:Delete") for st in landing for a in st["Action"])


# -- what the README says of the stack ---------------------------------------------------------


def test_every_stack_value_the_readme_names_is_a_stack_output() -> None:
    # The README's commands take stack outputs as <Name>: `OUTPUT=s3://<OutputBucket>/data` named a
    # resource, not an output, so no `describe-stacks` showed a value to put there
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"<([A-Z][A-Za-z]+)>", readme))
    assert {"LandingBucketName", "ManifestUri", "OutputDataUri", "QuarantineUri"} <= named
    assert named <= set(T["Outputs"]), named - set(T["Outputs"])


def test_the_control_plane_ticks_every_2_minutes_as_the_readme_and_the_prices_say() -> None:
    # README "Sizing": "A Lambda ticks every 2 minutes" (and "Within 2 minutes the control plane starts
    # the job"); infra/prices.py bills 30 ticks an hour
    from infra.prices import CONTROL_PLANE_TICKS_PER_HOUR

    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "A Lambda ticks every 2 minutes" in readme and "Within 2 minutes the control plane starts" in readme
    schedules = [r for r in of_type("AWS::Events::Rule").values() if "ScheduleExpression" in r["Properties"]]
    ticking = [r for r in schedules if r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": ["ControlPlane", "Arn"]}]
    assert [r["Properties"]["ScheduleExpression"] for r in ticking] == ["rate(2 minutes)"]
    assert ticking[0]["Properties"]["State"] == "ENABLED"
    assert json.loads(ticking[0]["Properties"]["Targets"][0]["Input"]) == {"command": "tick"}
    assert CONTROL_PLANE_TICKS_PER_HOUR == 60 // 2


def test_quarantine_records_expire_after_the_retention_parameter_and_the_tables_do_not() -> None:
    # README: the records under <QuarantineUri> are "expired after QuarantineRetentionDays". The
    # output bucket is versioned: an expired record is a noncurrent version until a noncurrent rule
    # removes it (S3 User Guide, "Lifecycle configuration elements": Expiration on a versioned bucket
    # adds a delete marker)
    rules = R["OutputBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    records = T["Outputs"]["QuarantineUri"]["Value"]["Fn::Sub"].split("}/", 1)[1]
    expiring = [r for r in rules if r["Status"] == "Enabled" and "ExpirationInDays" in r]
    assert [r["ExpirationInDays"] for r in expiring if r.get("Prefix") == records] == [
        {"Ref": "QuarantineRetentionDays"}
    ]
    # the table's files (data/, the quarantine table's data/quarantine among them) never expire
    assert all(r.get("Prefix", "").startswith(("quarantine/", "data/_staging/")) for r in expiring), expiring
    everything = [r for r in rules if r["Status"] == "Enabled" and not r.get("Prefix")]
    assert any("NoncurrentVersionExpiration" in r for r in everything)
