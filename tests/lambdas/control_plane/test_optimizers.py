"""The control plane keeps and watches the tables' Glue optimizers. moto has no table optimizers: Glue is a
botocore client answered by a small in-memory Glue (FakeGlue: the calls short-circuit at ``before-call``, as
botocore's Stubber does, after the client validated them; tests/lambdas/conftest.py also checks each against
the SDK the Lambda zip ships). An optimizer disabled, missing, failing or unreadable leaves a table
unmaintained; each tick counts them (TableOptimizersUnhealthy, which alarms) and says why.

Glue's behaviour encoded (AWS Glue API reference): BatchGetTableOptimizer answers each entry with the
optimizer or a failure (EntityNotFoundException when there is none); CreateTableOptimizer refuses one that
exists (AlreadyExistsException) or a table that does not exist (EntityNotFoundException);
UpdateTableOptimizer and DeleteTableOptimizer need an existing optimizer; GetTables pages with MaxResults at
most 100 (its model's CatalogGetterPageSize) and AttributesToGet NAME."""

from __future__ import annotations

import copy
import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse, HTTPHeaders

from contracts import metrics as M
from lambdas.control_plane.decision import JobView
from lambdas.control_plane.optimizers import BATCH, MAX_CHANGES, TABLES_PAGE, WATCHED, Keeper, OptimizerWatch
from lambdas.control_plane.service import ControlPlane
from lambdas.control_plane.settings import load_settings

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
ACCOUNT = "123456789012"
ROLE = "arn:aws:iam::123456789012:role/optimizers"
KEEPER = Keeper(ROLE, "s3://out/data", 5)


class FakeGlue:
    """Glue's table optimizers and table names, in memory, behind a real botocore client."""

    def __init__(self, tables: list[str]) -> None:
        self.tables = list(tables)
        self.optimizers: dict[tuple[str, str], dict[str, Any]] = {}  # (table, type) -> tableOptimizer
        self.calls: Counter[str] = Counter()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.errors: dict[str, str] = {}  # operation -> the error code every call of it gets
        self.client = boto3.client("glue", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        self.client.meta.events.register("before-parameter-build.glue", self._keep)
        self.client.meta.events.register_first("before-call.glue", self._answer)  # type: ignore[arg-type]
        self._params: dict[str, Any] = {}

    def has(self, table: str, kind: str, *, enabled: bool = True, last: str = "completed", **config: Any) -> None:
        self.optimizers[table, kind] = {
            "type": kind,
            "configuration": {"roleArn": ROLE, "enabled": enabled, **config},
            "lastRun": {"eventType": last},
        }

    def _keep(self, params: dict[str, Any], **_: Any) -> None:
        self._params = copy.deepcopy(params)

    def _answer(self, model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        op, p = model.name, self._params
        self.calls[op] += 1
        self.requests.append((op, p))
        if op in self.errors:
            return _error(self.errors[op])
        if op == "GetTables":
            start = int(p.get("NextToken", "0"))
            names = self.tables[start : start + p["MaxResults"]]
            more = start + p["MaxResults"] < len(self.tables)
            return _ok(
                {"TableList": [{"Name": n} for n in names], **({"NextToken": str(start + len(names))} if more else {})}
            )
        if op == "BatchGetTableOptimizer":
            found, failures = [], []
            for e in p["Entries"]:
                key = (e["tableName"], e["type"])
                if key in self.optimizers:
                    found.append({**_where(e["tableName"]), "tableOptimizer": self.optimizers[key]})
                else:
                    failures.append({**_where(e["tableName"]), "type": e["type"], "error": _not_found()})
            return _ok({"TableOptimizers": found, "Failures": failures})
        key = (p["TableName"], p["Type"])
        if p["TableName"] not in self.tables:
            return _error("EntityNotFoundException")
        if op == "CreateTableOptimizer":
            if key in self.optimizers:
                return _error("AlreadyExistsException")
            self.optimizers[key] = {"type": p["Type"], "configuration": p["TableOptimizerConfiguration"]}
            return _ok({})
        if key not in self.optimizers:
            return _error("EntityNotFoundException")
        if op == "UpdateTableOptimizer":
            self.optimizers[key] = {**self.optimizers[key], "configuration": p["TableOptimizerConfiguration"]}
        elif op == "DeleteTableOptimizer":
            del self.optimizers[key]
        return _ok({})


def _where(table: str) -> dict[str, str]:
    return {"catalogId": ACCOUNT, "databaseName": "db", "tableName": table}


def _not_found() -> dict[str, str]:
    return {"ErrorCode": "EntityNotFoundException", "ErrorMessage": "no such optimizer"}


def _ok(body: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]]:
    return AWSResponse("", 200, HTTPHeaders(), None), {**body, "ResponseMetadata": {"HTTPStatusCode": 200}}


def _error(code: str) -> tuple[AWSResponse, dict[str, Any]]:
    return AWSResponse("", 400, HTTPHeaders(), None), {
        "Error": {"Code": code, "Message": code},
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }


def orphan(days: int, location: str) -> dict[str, Any]:
    return {
        "orphanFileDeletionConfiguration": {
            "icebergConfiguration": {"orphanFileRetentionPeriodInDays": days, "location": location}
        }
    }


def kept_world(*tables: str) -> FakeGlue:
    """Glue with the stack's table ("events", its two optimizers healthy) and ``tables``."""
    glue = FakeGlue(["events", *tables])
    for kind in WATCHED:
        glue.has("events", kind)
    return glue


def watch_of(glue: FakeGlue, kept: list[str] | None = None, *, keeper: Keeper | None = KEEPER) -> OptimizerWatch:
    return OptimizerWatch(glue.client, ACCOUNT, "db", "events", kept=lambda: kept or [], keeper=keeper)


class Jobs:
    def view(self, *, paused: bool, desired_workers: int | None) -> JobView:
        return JobView("RUNNING", workers=2, started_at=NOW, paused=paused, desired_workers=desired_workers)

    def active_run_ids(self) -> list[str]:
        return ["jr_1"]

    def start(self, **_: Any) -> str:
        return "jr_2"

    def stop(self, run_ids: list[str]) -> None:
        pass


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
        optimizers=optimizers,
        clock=lambda: NOW,
    )
    return plane.tick()


def unhealthy(outcome: Any) -> float | None:
    values = [d.value for d in outcome.datums if d.name == M.TABLE_OPTIMIZERS_UNHEALTHY.name]
    return values[0] if values else None


# ------------------------------------------------------------------ the stack's table: watched


def stack_table(**optimizers: dict[str, Any]) -> FakeGlue:
    glue = FakeGlue(["events"])
    for kind, kwargs in optimizers.items():
        glue.has("events", kind, **kwargs)
    return glue


def test_healthy_optimizers_count_zero() -> None:
    glue = stack_table(compaction={}, orphan_file_deletion={})
    outcome = tick(watch_of(glue))
    assert unhealthy(outcome) == 0 and outcome.body["unhealthy_optimizers"] == []
    # the stack's own table: read only (the stack declares its optimizers), its two kinds in one call
    assert glue.calls == Counter({"BatchGetTableOptimizer": 1})


def test_a_disabled_a_failing_and_a_missing_optimizer_each_count_and_say_why() -> None:
    glue = stack_table(compaction={"enabled": False})
    outcome = tick(watch_of(glue))
    assert outcome.body["unhealthy_optimizers"] == [
        "events compaction: disabled",
        "events orphan_file_deletion: not configured",
    ]
    glue.has("events", "orphan_file_deletion", last="failed")
    glue.optimizers["events", "orphan_file_deletion"]["lastRun"]["error"] = "Commit conflict after 10 retries"
    outcome = tick(watch_of(glue))
    assert unhealthy(outcome) == 2
    assert outcome.body["unhealthy_optimizers"][1] == (
        "events orphan_file_deletion: last run failed: Commit conflict after 10 retries"
    )


def test_an_optimizer_still_running_is_healthy() -> None:
    glue = stack_table(compaction={"last": "in_progress"}, orphan_file_deletion={"last": "starting"})
    assert unhealthy(tick(watch_of(glue))) == 0


def test_the_stack_tables_retention_is_not_watched_the_job_expires_snapshots() -> None:
    # one owner of snapshot expiry: the job; the stack's table keeps compaction and orphan deletion only
    glue = stack_table(compaction={}, orphan_file_deletion={})
    tick(watch_of(glue))
    ((op, request),) = glue.requests
    assert op == "BatchGetTableOptimizer" and {e["type"] for e in request["Entries"]} == set(WATCHED)


def test_a_read_that_fails_still_alarms_and_says_why() -> None:
    # Given Glue refusing the read (throttled; denied after a policy change)
    glue = stack_table(compaction={}, orphan_file_deletion={})
    glue.errors["BatchGetTableOptimizer"] = "ThrottlingException"
    # When a tick watches
    outcome = tick(watch_of(glue))
    # Then the tick still kept the job, and the datapoint counts what it could not see, with why
    assert outcome.body["command"] == "tick" and outcome.error is None
    assert unhealthy(outcome) == 2
    assert outcome.body["unhealthy_optimizers"] == [
        "events compaction: unknown (read failed: ThrottlingException)",
        "events orphan_file_deletion: unknown (read failed: ThrottlingException)",
    ]


def test_an_optimizer_glue_will_not_describe_counts_unhealthy() -> None:
    glue = stack_table(compaction={}, orphan_file_deletion={})
    original = glue._answer

    def denied_for_one(model: Any, **kw: Any) -> Any:
        http, body = original(model, **kw)
        if model.name == "BatchGetTableOptimizer":  # one entry's failure, the other read
            body["TableOptimizers"] = [
                t for t in body["TableOptimizers"] if t["tableOptimizer"]["type"] != "compaction"
            ]
            denied = {"ErrorCode": "AccessDeniedException", "ErrorMessage": "x"}
            body["Failures"] = [{**_where("events"), "type": "compaction", "error": denied}]
        return http, body

    glue.client.meta.events.unregister("before-call.glue", original)  # type: ignore[arg-type]
    glue.client.meta.events.register_first("before-call.glue", denied_for_one)
    outcome = tick(watch_of(glue))
    assert outcome.body["unhealthy_optimizers"] == ["events compaction: unknown (AccessDeniedException)"]


def test_a_hive_table_has_no_optimizers_to_watch() -> None:
    assert unhealthy(tick(None)) is None


# ------------------------------------------------------------------ the job's tables: kept


def test_the_tables_the_job_made_get_compaction_and_orphan_deletion_over_their_whole_location() -> None:
    # Given the stack's table, the load history (no optimizers yet) and a routed table the job has not
    # created yet ("late")
    glue = kept_world("load_history")
    # When a tick watches them
    outcome = tick(watch_of(glue, ["load_history", "late"]))
    # Then the load history got compaction and orphan-file deletion over <output_uri>/<table>, which holds
    # ingest/ (batches) and data/ (compaction); no retention optimizer (the job expires snapshots); and
    # nothing was asked of the table that does not exist
    assert sorted(glue.optimizers) == [
        ("events", "compaction"),
        ("events", "orphan_file_deletion"),
        ("load_history", "compaction"),
        ("load_history", "orphan_file_deletion"),
    ]
    config = glue.optimizers["load_history", "orphan_file_deletion"]["configuration"]
    assert config == {"roleArn": ROLE, "enabled": True, **orphan(5, "s3://out/data/load_history")}
    assert not any(r.get("TableName") == "late" for _, r in glue.requests)
    assert unhealthy(outcome) == 0
    assert outcome.body["optimizer_changes"]["done"] == [
        "load_history compaction: created",
        "load_history orphan_file_deletion: created",
    ]


def test_an_optimizer_that_differs_from_the_stacks_settings_is_updated_and_a_disable_is_kept() -> None:
    # Given optimizers an earlier control plane created: orphan deletion on data/ only with 3 days, and a
    # compaction an operator disabled that runs as another role
    glue = kept_world("orders")
    glue.has("orders", "orphan_file_deletion", **orphan(3, "s3://out/data/orders/data"))
    glue.has("orders", "compaction", enabled=False)
    glue.optimizers["orders", "compaction"]["configuration"]["roleArn"] = "arn:aws:iam::123456789012:role/old"
    # When a tick keeps them (the stack now says 5 days)
    outcome = tick(watch_of(glue, ["orders"]))
    # Then each was updated to the stack's settings (UpdateTableOptimizer), the disabled one left disabled
    assert glue.calls["UpdateTableOptimizer"] == 2 and glue.calls["CreateTableOptimizer"] == 0
    assert glue.optimizers["orders", "orphan_file_deletion"]["configuration"] == {
        "roleArn": ROLE,
        "enabled": True,
        **orphan(5, "s3://out/data/orders"),
    }
    assert glue.optimizers["orders", "compaction"]["configuration"] == {"roleArn": ROLE, "enabled": False}
    assert outcome.body["optimizer_changes"]["done"] == [
        "orders compaction: updated (role)",
        "orders orphan_file_deletion: updated (orphan retention days, location)",
    ]
    assert outcome.body["unhealthy_optimizers"] == ["orders compaction: disabled"]
    # And the next tick finds nothing to change
    glue.calls.clear()
    tick(watch_of(glue, ["orders"]))
    assert set(glue.calls) == {"GetTables", "BatchGetTableOptimizer"}


def test_a_retention_optimizer_on_a_job_table_is_deleted_the_job_owns_snapshot_expiry() -> None:
    glue = kept_world("orders")
    for kind in ("compaction", "retention"):
        glue.has("orders", kind)
    glue.has("orders", "orphan_file_deletion", **orphan(5, "s3://out/data/orders"))
    outcome = tick(watch_of(glue, ["orders"]))
    assert ("orders", "retention") not in glue.optimizers and glue.calls["DeleteTableOptimizer"] == 1
    assert outcome.body["optimizer_changes"]["done"] == ["orders retention: deleted (the job expires the snapshots)"]
    assert unhealthy(outcome) == 0


def test_a_change_glue_refuses_counts_unhealthy_with_why() -> None:
    glue = kept_world("orders")
    glue.errors["CreateTableOptimizer"] = "AccessDeniedException"
    outcome = tick(watch_of(glue, ["orders"]))
    assert (
        "orders compaction: unknown (could not be created: AccessDeniedException)"
        in outcome.body["unhealthy_optimizers"]
    )


def test_the_job_tables_unreadable_still_alarms_and_the_stack_table_is_watched() -> None:
    # the routing file unreadable, or GetTables denied: the datapoint says so
    glue = stack_table(compaction={}, orphan_file_deletion={})
    glue.errors["GetTables"] = "AccessDeniedException"
    outcome = tick(watch_of(glue, ["orders"]))
    assert outcome.body["unhealthy_optimizers"] == [
        "(the job's tables) optimizers: unknown (get_tables of db failed: AccessDeniedException)"
    ]
    assert glue.calls["BatchGetTableOptimizer"] == 1


def test_the_watch_at_100_tables_costs_a_bounded_number_of_calls_a_tick() -> None:
    # Given the stack's table and 100 tables the job made (the load history, 99 routed), with no optimizers
    kept = ["load_history"] + [f"t{i:02d}" for i in range(99)]
    glue = kept_world(*kept)
    for table in kept[:5]:  # five with a retention optimizer from an earlier control plane
        glue.has(table, "retention")
    made, per_tick = 0, []
    # When ticks run until one changes nothing
    for _ in range(30):
        glue.calls.clear()
        outcome = tick(watch_of(glue, kept))
        per_tick.append(sum(glue.calls.values()))
        # Then each tick reads in batches: GetTables 2 pages (101 tables, 100 a page), 302 optimizers
        # read 20 a call, and makes at most MAX_CHANGES changes, creates first
        assert glue.calls["GetTables"] == -(-101 // TABLES_PAGE) == 2
        assert glue.calls["BatchGetTableOptimizer"] == -(-(2 + 3 * len(kept)) // BATCH) == 16
        writes = sum(glue.calls[op] for op in ("CreateTableOptimizer", "UpdateTableOptimizer", "DeleteTableOptimizer"))
        assert writes <= MAX_CHANGES == 10
        # and what waits for a later tick is listed, not counted unhealthy: every table is being kept
        assert unhealthy(outcome) == 0
        if "optimizer_changes" not in outcome.body:
            break
        made += 1
        assert len(outcome.body["optimizer_changes"]["queued"]) == max(0, 205 - 10 * made)
    # 200 creates, then 5 deletes, 10 a tick: 21 ticks of at most 2 + 16 + 10 = 28 calls
    assert made == 21 and max(per_tick) == 28 and per_tick[-2:] == [2 + 16 + 5, 2 + 16]
    assert sorted(glue.optimizers) == sorted([("events", k) for k in WATCHED] + [(t, k) for t in kept for k in WATCHED])
    assert json.dumps(outcome.body)  # the tick's response stays a JSON document


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
