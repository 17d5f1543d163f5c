"""The CloudWatch dashboard and the metric alarms, generated from contracts.metrics.

Every metric named here is a :class:`contracts.metrics.MetricDef`, with the dimensions the code
emits, so the dashboard and the alarms cannot drift from what the job and the Lambdas publish.
"""

from __future__ import annotations

import json
from typing import Any

from contracts import metrics as M
from contracts.metrics import MetricDef

# CloudFormation substitutions for each dimension the code emits (see infra/template.yaml).
DIMENSION_VALUES = {
    "JobName": "${ProjectName}-streaming",
    "QueryName": "${QueryName}",
    "service": "manifest-builder",
}
NAMESPACE = "${MetricsNamespace}"


def dims(metric: MetricDef) -> list[str]:
    out: list[str] = []
    for name in metric.dimensions:
        out += [name, DIMENSION_VALUES[name]]
    return out


def series(metric: MetricDef, stat: str = "Maximum", **options: Any) -> list[Any]:
    return [NAMESPACE, metric.name, *dims(metric), {"stat": stat, **options}]


def widget(
    title: str, metrics: list[list[Any]], *, x: int, y: int, w: int = 12, h: int = 6, **props: Any
) -> dict[str, Any]:
    return {
        "type": "metric",
        "x": x,
        "y": y,
        "width": w,
        "height": h,
        "properties": {
            "title": title,
            "region": "${AWS::Region}",
            "view": "timeSeries",
            "period": 60,
            "metrics": metrics,
            **props,
        },
    }


def dashboard_body() -> dict[str, Any]:
    """Panels in the order of the seed post's monitoring advice."""
    sla = {"horizontal": [{"label": "latency SLA", "value": 0}]}
    rows: list[tuple[Any, ...]] = [
        (
            "Input rate vs process rate (records/s): close means at capacity",
            [series(M.INPUT_ROWS_PER_SECOND, "Average"), series(M.PROCESSED_ROWS_PER_SECOND, "Average")],
        ),
        ("Batch duration vs trigger interval (ms)", [series(M.BATCH_DURATION), series(M.TRIGGER_INTERVAL)]),
        (
            "Utilization (batch duration / trigger interval)",
            [series(M.UTILIZATION)],
            {"annotations": {"horizontal": [{"label": "at capacity", "value": 1}]}},
        ),
        (
            "Operation durations (ms): addBatch should dominate",
            [
                series(m, "Average")
                for m in (
                    M.ADD_BATCH_DURATION,
                    M.GET_BATCH_DURATION,
                    M.LATEST_OFFSET_DURATION,
                    M.QUERY_PLANNING_DURATION,
                    M.WAL_COMMIT_DURATION,
                )
            ],
            {"stacked": True},
        ),
        ("Backlog: waiting manifests and bytes", [series(M.BACKLOG_MANIFESTS), series(M.BACKLOG_BYTES, yAxis="right")]),
        (
            "Arrival: data bytes listed in manifests per minute (what the control plane sizes for)",
            [series(M.BYTES_PER_MANIFEST, "Sum")],
        ),
        ("Age of the oldest waiting manifest (s)", [series(M.BACKLOG_AGE)], {"annotations": sla}),
        (
            "End-to-end latency, S3 event -> Parquet commit (s)",
            [series(M.LATENCY_MAX), series(M.LATENCY_P95)],
            {"annotations": sla},
        ),
        (
            "Records in / out / bad (per minute)",
            [series(M.RECORDS_IN, "Sum"), series(M.RECORDS_OUT, "Sum"), series(M.BAD_RECORDS, "Sum")],
        ),
        (
            "Bad objects and poison manifests",
            [
                series(M.MISSING_OBJECTS, "Sum"),
                series(M.UNREADABLE_OBJECTS, "Sum"),
                series(M.QUARANTINED_MANIFESTS, "Sum"),
                series(M.PUBLISH_FAILURES, "Sum"),
            ],
        ),
        (
            "Parquet files written and average size",
            [series(M.PARQUET_FILES, "Sum"), series(M.PARQUET_AVG_SIZE, "Average", yAxis="right")],
        ),
        (
            "Columns: values rescued (declared types), values past max_columns (_extra), rows in the null partition "
            "(missing values; partitions past the limit)",
            [
                series(M.RESCUED_VALUES, "Sum"),
                series(M.EXTRA_VALUES, "Sum"),
                series(M.NULL_PARTITION_RECORDS, "Sum"),
                series(M.PARTITION_OVERFLOW_RECORDS, "Sum"),
            ],
        ),
        (
            "Mirror: rows of changed or deleted objects removed, bytes of data files rewritten to remove them",
            [series(M.ROWS_REPLACED, "Sum"), series(M.BYTES_REWRITTEN, "Sum", yAxis="right")],
        ),
        (
            "Table: commit duration (ms), snapshots and data files",
            [
                series(M.TABLE_COMMIT_DURATION, "Maximum"),
                series(M.TABLE_SNAPSHOTS, "Maximum", yAxis="right"),
                series(M.TABLE_DATA_FILES, "Maximum", yAxis="right"),
            ],
        ),
        (
            "Workers: current vs desired",
            [series(M.CURRENT_WORKERS), series(M.DESIRED_WORKERS), series(M.JOB_RUNNING, "Minimum", yAxis="right")],
        ),
        (
            "Manifest Lambda",
            [
                series(M.MANIFESTS_WRITTEN, "Sum"),
                series(M.OBJECTS_PER_MANIFEST, "Average"),
                series(M.DUPLICATES_DROPPED, "Sum"),
                series(M.RECORDS_REJECTED, "Sum"),
            ],
        ),
        (
            "SQS: landing queue and dead-letter queue",
            [
                ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${ProjectName}-landing-events"],
                [
                    "AWS/SQS",
                    "ApproximateAgeOfOldestMessage",
                    "QueueName",
                    "${ProjectName}-landing-events",
                    {"yAxis": "right"},
                ],
                ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${ProjectName}-landing-events-dlq"],
            ],
        ),
        (
            "Lambda errors and durations",
            [
                ["AWS/Lambda", "Errors", "FunctionName", "${ProjectName}-manifest-builder", {"stat": "Sum"}],
                ["AWS/Lambda", "Errors", "FunctionName", "${ProjectName}-control-plane", {"stat": "Sum"}],
                [
                    "AWS/Lambda",
                    "Duration",
                    "FunctionName",
                    "${ProjectName}-manifest-builder",
                    {"stat": "p95", "yAxis": "right"},
                ],
                [
                    "AWS/Lambda",
                    "Duration",
                    "FunctionName",
                    "${ProjectName}-control-plane",
                    {"stat": "p95", "yAxis": "right"},
                ],
            ],
        ),
    ]
    rows += [
        (
            "Top tables by rows written (per minute)",
            [top_tables(M.RECORDS_OUT, "SUM", "rows")],
        ),
        ("Top tables by bytes read (per minute)", [top_tables(M.INPUT_BYTES, "SUM", "bytes")]),
        (
            "Top tables by quarantined lines and refused objects",
            [
                top_tables(M.BAD_RECORDS, "SUM", "bad", qid="b"),
                top_tables(M.REFUSED_OBJECTS, "SUM", "refused", qid="r"),
            ],
        ),
        ("Top rules broken, by table (rows per minute)", [top_rules(M.RULE_VIOLATIONS, "SUM", "violations")]),
        (
            "Slowest tables to publish (ms) and publication failures",
            [
                top_tables(M.TABLE_COMMIT_DURATION, "MAX", "commit ms"),
                top_tables(M.PUBLISH_FAILURES, "SUM", "failures", qid="f", yAxis="right"),
            ],
        ),
        (
            "Shares set aside, load history owed, objects no route takes",
            [
                series(M.DEFERRED_PUBLICATIONS),
                series(M.LOAD_HISTORY_BEHIND),
                series(M.LOAD_HISTORY_DROPPED, "Sum"),
                series(M.UNROUTED_OBJECTS, "Sum", yAxis="right"),
            ],
        ),
    ]
    widgets = []
    for i, row in enumerate(rows):
        title, metrics, *extra = row
        props: dict[str, Any] = extra[0] if extra else {}
        widgets.append(widget(title, metrics, x=12 * (i % 2), y=6 * (i // 2), **props))
    return {"widgets": widgets}


TOP_TABLES = 10


def top_tables(metric: MetricDef, aggregate: str, label: str, *, qid: str = "q", **options: Any) -> list[Any]:
    """A Metrics Insights query over the metric's per-table series: the top tables of the job, one line
    each (CloudWatch User Guide, "Query your metrics with CloudWatch Metrics Insights")."""
    if not metric.per_table:
        raise ValueError(f"{metric.name} is not published per table")
    names = ", ".join(f'"{d}"' for d in metric.table_dimensions)
    where = " AND ".join(f"\"{d}\" = '{DIMENSION_VALUES[d]}'" for d in metric.dimensions)
    # every part is a constant of contracts.metrics or a stack parameter: nothing a user types
    query = (
        f'SELECT {aggregate}("{metric.name}") FROM SCHEMA("{NAMESPACE}", {names}) WHERE {where} '  # noqa: S608
        f'GROUP BY "{M.TABLE_DIMENSION}" ORDER BY {aggregate}() DESC LIMIT {TOP_TABLES}'
    )
    return [{"expression": query, "label": label, "id": qid, "period": 60, **options}]


def top_rules(metric: MetricDef, aggregate: str, label: str, *, qid: str = "q") -> list[Any]:
    """A Metrics Insights query over the metric's per-rule series: the rules broken most, one line
    per table and rule (rules are the routing file's: no resource can name them in advance)."""
    if not metric.per_rule:
        raise ValueError(f"{metric.name} is not published per rule")
    names = ", ".join(f'"{d}"' for d in metric.rule_dimensions)
    where = " AND ".join(f"\"{d}\" = '{DIMENSION_VALUES[d]}'" for d in metric.dimensions)
    group = f'"{M.TABLE_DIMENSION}", "{M.RULE_DIMENSION}"'
    query = (
        f'SELECT {aggregate}("{metric.name}") FROM SCHEMA("{NAMESPACE}", {names}) WHERE {where} '  # noqa: S608
        f"GROUP BY {group} ORDER BY {aggregate}() DESC LIMIT {TOP_TABLES}"
    )
    return [{"expression": query, "label": label, "id": qid, "period": 60}]


def dashboard_resource(latency_sla_param: str = "LatencySlaSeconds") -> dict[str, Any]:
    body = json.dumps(dashboard_body(), separators=(",", ":"))
    # the SLA line follows the stack parameter
    sla_line = '"label":"latency SLA","value":${' + latency_sla_param + "}"
    body = body.replace('"label":"latency SLA","value":0', sla_line)
    return {
        "Type": "AWS::CloudWatch::Dashboard",
        "Properties": {"DashboardName": {"Fn::Sub": "${ProjectName}"}, "DashboardBody": {"Fn::Sub": body}},
    }


def _value(text: str) -> Any:
    return {"Fn::Sub": text} if "${" in text else text


def _dimensions(metric: MetricDef) -> list[dict[str, Any]]:
    return [{"Name": n, "Value": _value(DIMENSION_VALUES[n])} for n in metric.dimensions]


def _metric_alarm(
    name: str,
    description: str,
    metric: MetricDef,
    *,
    stat: str,
    period: int,
    periods: Any,
    threshold: Any,
    operator: str,
    missing: str = "notBreaching",
) -> dict[str, Any]:
    return {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmName": {"Fn::Sub": "${ProjectName}-" + name},
            "AlarmDescription": description,
            "Namespace": {"Ref": "MetricsNamespace"},
            "MetricName": metric.name,
            "Dimensions": _dimensions(metric),
            "Statistic": stat,
            "Period": period,
            "EvaluationPeriods": periods,
            "DatapointsToAlarm": periods,
            "Threshold": threshold,
            "ComparisonOperator": operator,
            "TreatMissingData": missing,
            "AlarmActions": [{"Ref": "AlarmTopic"}],
            "OKActions": [{"Ref": "AlarmTopic"}],
        },
    }


def _query(qid: str, metric: MetricDef, stat: str) -> dict[str, Any]:
    return {
        "Id": qid,
        "ReturnData": False,
        "MetricStat": {
            "Metric": {
                "Namespace": {"Ref": "MetricsNamespace"},
                "MetricName": metric.name,
                "Dimensions": _dimensions(metric),
            },
            "Period": 60,
            "Stat": stat,
        },
    }


def alarm_resources() -> dict[str, dict[str, Any]]:
    return {
        "UtilizationAtCapacity": _metric_alarm(
            "utilization-at-capacity",
            "batches take as long as the trigger interval: the job cannot keep up",
            M.UTILIZATION,
            stat="Maximum",
            period=60,
            periods={"Ref": "UtilizationBatches"},
            threshold=1,
            operator="GreaterThanOrEqualToThreshold",
        ),
        "BacklogAgeOverSla": _metric_alarm(
            "backlog-age-over-sla",
            "the oldest waiting manifest is older than the latency SLA",
            M.BACKLOG_AGE,
            stat="Maximum",
            period=60,
            periods=3,
            threshold={"Ref": "LatencySlaSeconds"},
            operator="GreaterThanThreshold",
        ),
        "JobNotRunning": _metric_alarm(
            "job-not-running",
            "no STARTING/RUNNING job run (or the control plane is not reporting)",
            M.JOB_RUNNING,
            stat="Maximum",
            period=300,
            periods=2,
            threshold=1,
            operator="LessThanThreshold",
            missing="breaching",
        ),
        "RestartsExhausted": _metric_alarm(
            "restarts-exhausted",
            "the job failed more often in a row than the control plane may restart it",
            M.RESTARTS_EXHAUSTED,
            stat="Maximum",
            period=300,
            periods=1,
            threshold=1,
            operator="GreaterThanOrEqualToThreshold",
        ),
        "SlowTableCommits": _metric_alarm(
            "slow-table-commits",
            "publishing batches takes over a third of the trigger interval (catalog throttling, commit conflicts, "
            "or snapshot metadata growing because retention does not run)",
            M.TABLE_COMMIT_DURATION,
            stat="Average",
            period=300,
            periods=3,
            threshold=10_000,
            operator="GreaterThanThreshold",
        ),
        "PublishFailures": _metric_alarm(
            "publish-failures",
            "committed batches cannot be published (the catalog refuses, throttles or is unreachable): the stream "
            "waits on the batch; the job's log says why (glue_processor/commit/publication.py)",
            M.PUBLISH_FAILURES,
            stat="Sum",
            period=300,
            periods=1,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        "DeferredPublications": _metric_alarm(
            "deferred-publications",
            "a table's share of a batch kept failing to publish and was set aside: it is retried every batch and "
            "nothing is lost, but that table is behind; the job's log names the table and the cause",
            M.DEFERRED_PUBLICATIONS,
            stat="Maximum",
            period=300,
            periods=1,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        "LoadHistoryBehind": _metric_alarm(
            "load-history-behind",
            "the load history has refused appends for two 5-minute periods in a row (its table or catalog): the "
            "data is loaded, and the appends are retried before each batch's and on idle triggers, 32 at most; "
            "the job's log says why",
            M.LOAD_HISTORY_BEHIND,
            stat="Maximum",
            period=300,
            periods=2,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        "LoadHistoryDropped": _metric_alarm(
            "load-history-dropped",
            "the load history stopped retrying a batch (a 33rd was owed, or the job stopped owing it): that "
            "batch's rows are only in the ledger; make backfill OUTPUT= and make reconcile read the ledger, and "
            "the job's log names each batch ('the load history misses a batch')",
            M.LOAD_HISTORY_DROPPED,
            stat="Sum",
            period=300,
            periods=1,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        "RefusedObjects": _metric_alarm(
            "refused-objects",
            "a table refused a batch's schema change (names, width, types that do not merge): that table's objects "
            "were quarantined whole, with the cause, and the other tables went on; fix the table or the routing "
            "file, then requeue them (make reconcile REQUEUE=1)",
            M.REFUSED_OBJECTS,
            stat="Sum",
            period=300,
            periods=1,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        "PartitionsPastBound": _metric_alarm(
            "partitions-past-bound",
            "batches touch more partitions than --max_partitions_per_batch: nothing is lost, but each batch is slower "
            "and writes small files; check --partition_by against the data (a high-cardinality identity field, "
            "or late data spread over many days)",
            M.PARTITIONS_PAST_BOUND,
            stat="Sum",
            period=300,
            periods=3,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        "PartitionOverflow": _metric_alarm(
            "partition-overflow",
            "a batch touched more partitions than --partition_limit_per_batch: the rows of its smallest partitions "
            "went to the null partition, their partition values in _extra (nothing lost); check --partition_by "
            "against the data, or raise the limit",
            M.PARTITION_OVERFLOW_RECORDS,
            stat="Sum",
            period=300,
            periods=1,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        "TableOptimizersUnhealthy": _metric_alarm(
            "table-optimizers-unhealthy",
            "a table optimizer (compaction, orphan-file deletion) is disabled, missing, failing or could not be "
            "read or changed: the table is not maintained; the control plane's log says which and why",
            M.TABLE_OPTIMIZERS_UNHEALTHY,
            stat="Maximum",
            period=300,
            periods=3,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        # objects a manifest named that were not loaded: quarantined with the cause, never silent
        "MissingObjects": _metric_alarm(
            "missing-objects",
            "objects a manifest listed were gone when the job read them (deleted, or their version expired before "
            "the backlog reached it): each is quarantined with its cause; check LandingNoncurrentDays against the "
            "backlog, and the producers' deletes",
            M.MISSING_OBJECTS,
            stat="Sum",
            period=300,
            periods=1,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        "UnreadableObjects": _metric_alarm(
            "unreadable-objects",
            "objects could not be read or decompressed (a broken gzip, a read that kept failing): each is "
            "quarantined with its cause and the lines before the break are loaded",
            M.UNREADABLE_OBJECTS,
            stat="Sum",
            period=300,
            periods=1,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        # notified objects the manifest Lambda did not list: after a LandingPrefix or suffix change, the
        # events still in flight for the old filter (docs/operations.md, "Moving the landing prefix")
        "ObjectsIgnored": _metric_alarm(
            "objects-ignored",
            "notified objects were outside the prefix/suffix filter and were not listed: the manifest Lambda's log "
            "names them; make reconcile lists the objects never loaded",
            M.OBJECTS_IGNORED,
            stat="Sum",
            period=300,
            periods=1,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        "PoisonManifests": _metric_alarm(
            "quarantined-manifests",
            "manifests were quarantined (invalid, or failed too many times)",
            M.QUARANTINED_MANIFESTS,
            stat="Sum",
            period=300,
            periods=1,
            threshold=0,
            operator="GreaterThanThreshold",
        ),
        # rules are the routing file's, so no alarm can name one: the job compares each rule with its
        # own usual (glue_processor/metrics/rule_surge.py) and publishes the highest ratio
        "RuleViolationSurge": _metric_alarm(
            "rule-violation-surge",
            f"a rule of a table is broken {M.RULE_SURGE_ALARM:g}x as often as usual (its share of the table's rows "
            "against its last hour's): a producer changed what it sends, or a rule no longer fits; the dashboard's "
            "top rules name the table and rule, the quarantine table the rows",
            M.RULE_VIOLATION_SURGE,
            stat="Maximum",
            period=300,
            periods=1,
            threshold=M.RULE_SURGE_ALARM,
            operator="GreaterThanThreshold",
        ),
        "NoRecordsWhileFilesArrive": {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "AlarmName": {"Fn::Sub": "${ProjectName}-no-records-while-files-arrive"},
                "AlarmDescription": "manifests keep arriving but no record has been written",
                "Metrics": [
                    _query("records", M.RECORDS_OUT, "Sum"),
                    _query("manifests", M.MANIFESTS_WRITTEN, "Sum"),
                    {
                        "Id": "stalled",
                        "Label": "manifests arriving, no records written",
                        "ReturnData": True,
                        "Expression": "IF(FILL(manifests, 0) > 0 AND FILL(records, 0) == 0, 1, 0)",
                    },
                ],
                "EvaluationPeriods": {"Ref": "NoRecordsMinutes"},
                "DatapointsToAlarm": {"Ref": "NoRecordsMinutes"},
                "Threshold": 1,
                "ComparisonOperator": "GreaterThanOrEqualToThreshold",
                "TreatMissingData": "notBreaching",
                "AlarmActions": [{"Ref": "AlarmTopic"}],
                "OKActions": [{"Ref": "AlarmTopic"}],
            },
        },
    }
