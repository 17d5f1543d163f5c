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
from lambdas.control_plane.optimizers import TYPES, OptimizerWatch
from lambdas.control_plane.service import ControlPlane
from lambdas.control_plane.settings import load_settings

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def optimizer(
    kind: str, *, enabled: bool = True, last: str | None = "completed", error: str | None = None
) -> dict[str, Any]:
    run: dict[str, Any] = {"eventType": last} if last else {}
    if error:
        run["error"] = error
    return {
        "CatalogId": "123456789012",
        "DatabaseName": "db",
        "TableName": "events",
        "TableOptimizer": {
            "type": kind,
            "configuration": {"roleArn": "arn:aws:iam::123456789012:role/o", "enabled": enabled},
            **({"lastRun": run} if run else {}),
        },
    }


def watch(responses: list[dict[str, Any] | str]) -> tuple[OptimizerWatch, Stubber]:
    glue = boto3.client("glue", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(glue)
    for kind, response in zip(TYPES, responses, strict=True):
        params = {"CatalogId": "123456789012", "DatabaseName": "db", "TableName": "events", "Type": kind}
        if isinstance(response, str):
            stub.add_client_error("get_table_optimizer", response, "no such optimizer", 400, expected_params=params)
        else:
            stub.add_response("get_table_optimizer", response, params)
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

    def save(self, st: dict[str, Any]) -> None:
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
        "compaction: disabled",
        "retention: last run failed: Commit conflict after 10 retries",
        "orphan_file_deletion: not configured",
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
    optimizers, _ = watch(["AccessDeniedException", "AccessDeniedException", "AccessDeniedException"])
    outcome = tick(optimizers)
    assert unhealthy(outcome) is None and outcome.body["command"] == "tick"


def test_a_hive_table_has_no_optimizers_to_watch() -> None:
    assert unhealthy(tick(None)) is None
