"""The control plane watches the table's Glue optimizers (Stubber-scripted Glue: moto has no
GetTableOptimizer). An optimizer disabled, missing or whose last run failed leaves the table
unmaintained; each tick counts them (TableOptimizersUnhealthy, which alarms) and says why."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.stub import Stubber

from contracts import metrics as M
from lambdas.control_plane.decision import JobView
from lambdas.control_plane.optimizers import BATCH, TYPES, Keeper, OptimizerWatch
from lambdas.control_plane.service import ControlPlane
from lambdas.control_plane.settings import load_settings

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def optimizer(
    kind: str,
    *,
    enabled: bool = True,
    last: str | None = "completed",
    error: str | None = None,
    table: str = "events",
) -> dict[str, Any]:
    run: dict[str, Any] = {"eventType": last} if last else {}
    if error:
        run["error"] = error
    return {
        "catalogId": "123456789012",
        "databaseName": "db",
        "tableName": table,
        "tableOptimizer": {
            "type": kind,
            "configuration": {"roleArn": "arn:aws:iam::123456789012:role/o", "enabled": enabled},
            **({"lastRun": run} if run else {}),
        },
    }


def missing(kind: str, table: str = "events") -> dict[str, Any]:
    return {
        "catalogId": "123456789012",
        "databaseName": "db",
        "tableName": table,
        "type": kind,
        "error": {"ErrorCode": "EntityNotFoundException", "ErrorMessage": "no such optimizer"},
    }


def entries(tables: list[str]) -> list[dict[str, str]]:
    return [
        {"catalogId": "123456789012", "databaseName": "db", "tableName": t, "type": k} for t in tables for k in TYPES
    ]


def watch(responses: list[dict[str, Any] | str]) -> tuple[OptimizerWatch, Stubber]:
    """The stack's table alone: one BatchGetTableOptimizer answering with ``responses`` (one per type;
    a string is an error code for that optimizer)."""
    glue = boto3.client("glue", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(glue)
    found = [r for r in responses if not isinstance(r, str)]
    failures = [
        {**missing(kind), "error": {"ErrorCode": r, "ErrorMessage": "x"}}
        for kind, r in zip(TYPES, responses, strict=True)
        if isinstance(r, str)
    ]
    stub.add_response(
        "batch_get_table_optimizer",
        {"TableOptimizers": found, "Failures": failures},
        {"Entries": entries(["events"])},
    )
    stub.activate()
    return OptimizerWatch(glue, "123456789012", "db", "events"), stub


class Jobs:
    def view(self, *, paused: bool, desired_workers: int | None) -> JobView:
        return JobView("RUNNING", workers=2, started_at=NOW, paused=paused, desired_workers=desired_workers)

    def active_run_ids(self) -> list[str]:
        return ["jr_1"]


class Metrics:
    def series(self, *_: Any, **__: Any) -> list[float]:
        return []

    def age_s(self, *_: Any, **__: Any) -> float | None:
        return None


class State:
    def __init__(self) -> None:
        self.st: dict[str, Any] = {"paused": False}

    def load(self) -> dict[str, Any]:
        return dict(self.st)

    def load_versioned(self) -> tuple[dict[str, Any], str | None]:
        return dict(self.st), str(id(self.st))

    def save_if(self, st: dict[str, Any], version: str | None) -> None:
        assert version == str(id(self.st))
        self.st = st


def tick(optimizers: OptimizerWatch | None) -> Any:
    plane = ControlPlane(
        load_settings(job_name="job"),
        jobs=Jobs(),
        metrics=Metrics(),
        state=State(),
        optimizers=optimizers,  # type: ignore[arg-type]
        clock=lambda: NOW,
    )
    return plane.tick()


def unhealthy(outcome: Any) -> float | None:
    values = [d.value for d in outcome.datums if d.name == M.TABLE_OPTIMIZERS_UNHEALTHY.name]
    return values[0] if values else None


def test_healthy_optimizers_count_zero() -> None:
    optimizers, stub = watch([optimizer(k) for k in TYPES])
    outcome = tick(optimizers)
    assert unhealthy(outcome) == 0 and outcome.body["unhealthy_optimizers"] == []
    stub.assert_no_pending_responses()


def test_a_disabled_a_failing_and_a_missing_optimizer_each_count_and_say_why() -> None:
    optimizers, _ = watch(
        [
            optimizer("compaction", enabled=False),
            optimizer("retention", last="failed", error="Commit conflict after 10 retries"),
            "EntityNotFoundException",
        ]
    )
    outcome = tick(optimizers)
    assert unhealthy(outcome) == 3
    assert outcome.body["unhealthy_optimizers"] == [
        "events compaction: disabled",
        "events retention: last run failed: Commit conflict after 10 retries",
        "events orphan_file_deletion: not configured",
    ]


def test_an_optimizer_still_running_is_healthy() -> None:
    optimizers, _ = watch(
        [
            optimizer("compaction", last="in_progress"),
            optimizer("retention", last=None),
            optimizer("orphan_file_deletion"),
        ]
    )
    assert unhealthy(tick(optimizers)) == 0


def test_a_glue_error_never_stops_the_tick_that_keeps_the_job_alive() -> None:
    # an optimizer Glue will not describe (access denied) is reported as unknown, with why
    optimizers, _ = watch(["AccessDeniedException", optimizer("retention"), optimizer("orphan_file_deletion")])
    outcome = tick(optimizers)
    assert unhealthy(outcome) == 1 and outcome.body["command"] == "tick"
    assert outcome.body["unhealthy_optimizers"] == ["events compaction: unknown (AccessDeniedException)"]
    # and so does a call that fails whole
    glue = boto3.client("glue", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(glue)
    stub.add_client_error("batch_get_table_optimizer", "ThrottlingException", "slow down", 400)
    stub.activate()
    assert unhealthy(tick(OptimizerWatch(glue, "123456789012", "db", "events"))) is None


def test_a_hive_table_has_no_optimizers_to_watch() -> None:
    assert unhealthy(tick(None)) is None


KEEPER = Keeper("arn:aws:iam::123456789012:role/optimizers", "s3://out/data", 2, 5)


def test_the_tables_the_job_made_get_their_missing_optimizers_and_are_watched_in_batches() -> None:
    # Given the stack's table with its optimizers, and the job's tables: the load history (which has
    # none yet), and 7 routed tables of which one ("late") the job has not created yet
    routed = [f"t{i}" for i in range(6)] + ["late"]
    kept = ["load_history", *routed]
    glue = boto3.client("glue", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(glue)
    wanted = entries(["events", *kept])
    have = {("events", k) for k in TYPES} | {(t, k) for t in routed[:6] for k in TYPES}
    for i in range(0, len(wanted), BATCH):  # 27 optimizers: two calls of at most 20
        chunk = wanted[i : i + BATCH]
        stub.add_response(
            "batch_get_table_optimizer",
            {
                "TableOptimizers": [
                    optimizer(e["type"], table=e["tableName"]) for e in chunk if (e["tableName"], e["type"]) in have
                ],
                "Failures": [
                    missing(e["type"], e["tableName"]) for e in chunk if (e["tableName"], e["type"]) not in have
                ],
            },
            {"Entries": chunk},
        )
    created: list[tuple[str, str]] = []
    for table in ("load_history", "late"):
        for kind in TYPES:
            params = {
                "CatalogId": "123456789012",
                "DatabaseName": "db",
                "TableName": table,
                "Type": kind,
                "TableOptimizerConfiguration": KEEPER.configuration(table, kind),
            }
            if table == "late":  # the job has not created this table yet
                stub.add_client_error("create_table_optimizer", "EntityNotFoundException", "no table", 400, params)
            else:
                stub.add_response("create_table_optimizer", {}, params)
                created.append((table, kind))
    stub.activate()
    watch_ = OptimizerWatch(glue, "123456789012", "db", "events", kept=lambda: kept, keeper=KEEPER)
    # When a tick watches them
    outcome = tick(watch_)
    # Then the load history's three optimizers were created (orphan deletion on data/ only), every
    # table is healthy, and the table that does not exist yet is left for a later tick
    stub.assert_no_pending_responses()
    assert created == [("load_history", k) for k in TYPES]
    assert unhealthy(outcome) == 0
    orphan = KEEPER.configuration("load_history", "orphan_file_deletion")["orphanFileDeletionConfiguration"]
    assert orphan["icebergConfiguration"]["location"] == "s3://out/data/load_history/data"
    retention = KEEPER.configuration("x", "retention")["retentionConfiguration"]["icebergConfiguration"]
    assert retention["snapshotRetentionPeriodInDays"] == 2


def test_the_tables_the_job_makes_come_from_its_routing_file_read_once(aws: None) -> None:
    from contracts.routing import Route, Routing, TableSpec
    from lambdas.control_plane.routes import job_tables

    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="deploy")
    routing = Routing(
        tables={"orders": TableSpec(), "clicks": TableSpec()},
        routes=[Route(table="orders"), Route(table="clicks", prefix="c/")],
    )
    s3.put_object(Bucket="deploy", Key="routes/abc.json", Body=routing.to_json())
    s = load_settings(job_name="j", routes_uri="s3://deploy/routes/abc.json", load_history_table="load_history")
    assert job_tables(s, s3) == ["load_history", "orders", "clicks"]
    s3.delete_object(Bucket="deploy", Key="routes/abc.json")  # its key names its content: read once
    assert job_tables(s, s3) == ["load_history", "orders", "clicks"]
