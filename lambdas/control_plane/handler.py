"""Lambda entry point of the control plane: on a schedule (tick) and on demand (commands)."""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.config import Config
from pydantic import BaseModel, ConfigDict, Field

from contracts.surge import DETAIL_TYPE, SOURCE, SurgeDetail
from lambdas.control_plane.exceptions import ControlPlaneError
from lambdas.control_plane.glue_gateway import GlueJobGateway
from lambdas.control_plane.manifests import S3ManifestListing
from lambdas.control_plane.metrics_reader import CloudWatchReader
from lambdas.control_plane.optimizers import Keeper, OptimizerWatch
from lambdas.control_plane.routes import job_tables
from lambdas.control_plane.service import Command, ControlPlane
from lambdas.control_plane.settings import ControlSettings, load_settings
from lambdas.control_plane.state import S3StateStore

logger = Logger(service="control-plane")
# No service dimension: the control plane's metrics carry exactly contracts.metrics' JobName.
metrics = Metrics()


class CommandEvent(BaseModel):
    """``{"command": "status"}``, ``{"command": "restart"}``, ``{"command": "scale", "workers": 6}``;
    a scheduled event (no ``command``) is a tick; ``{"command": "surge"}`` lists the manifests for a
    surge (the manifest Lambda's signal, ``contracts.surge``'s event, arrives as it is)."""

    model_config = ConfigDict(extra="ignore")
    command: Command = "tick"
    workers: int | None = Field(default=None, ge=1)


@cache
def _plane() -> ControlPlane:
    s = load_settings()
    if s.misconfigured:
        logger.warning("settings read otherwise than given", extra={"misconfigured": list(s.misconfigured)})
    cfg = Config(retries={"max_attempts": 5, "mode": "standard"})
    if not s.state_bucket:
        from contracts.exceptions import ConfigError

        raise ConfigError("STATE_BUCKET is required in Lambda")
    glue = boto3.client("glue", config=cfg)
    s3 = boto3.client("s3", config=cfg)
    return ControlPlane(
        s,
        jobs=GlueJobGateway(glue, s.job_name),
        optimizers=optimizer_watch(s, glue, s3),
        metrics=CloudWatchReader(boto3.client("cloudwatch", config=cfg), s.metrics_namespace, s.dimensions),
        state=S3StateStore(s3, s.state_bucket, s.state_key),
        listing=S3ManifestListing(s3, s.manifest_bucket, s.manifest_prefix) if s.manifest_bucket else None,
    )


def optimizer_watch(s: ControlSettings, glue: Any, s3: Any) -> OptimizerWatch | None:
    """The optimizers of the stack's table, and of the tables the job creates (the routing file's,
    the load history), which it keeps; None for a table without optimizers (hive-parquet)."""
    if not (s.catalog_id and s.table_database and s.table_name):
        return None
    keeper = None
    if s.optimizer_role_arn and s.output_uri:
        keeper = Keeper(s.optimizer_role_arn, s.output_uri, s.orphan_retention_days)
    return OptimizerWatch(
        glue,
        s.catalog_id,
        s.table_database,
        s.table_name,
        kept=lambda: job_tables(s, s3),
        keeper=keeper,
    )


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    plane = _plane()
    metrics.namespace = plane.s.metrics_namespace
    if event.get("source") == SOURCE and event.get("detail-type") == DETAIL_TYPE:
        # delivered whole (a control plane from before the signal treats it as a tick: harmless)
        outcome = plane.surge(SurgeDetail.model_validate(event.get("detail", {})).oldest)
    else:
        command = CommandEvent.model_validate(event if "command" in event else {})
        outcome = plane.handle(command.command, command.workers)
    if outcome.datums:
        for name, value in outcome.datums[0].dimensions.items():
            metrics.add_dimension(name=name, value=value)
    for d in outcome.datums:
        metrics.add_metric(name=d.name, unit=MetricUnit(d.unit), value=d.value)
    if outcome.error is not None:
        logger.error("the command acted, then failed", extra={"response": outcome.body})
        raise ControlPlaneError(outcome.error)
    return outcome.body
