"""Lambda entry point of the manifest builder: validate, delegate, return."""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.config import Config

from contracts.layout import source_uri
from lambdas.manifest_builder.metrics import SERVICE, result_datums
from lambdas.manifest_builder.service import build_manifests
from lambdas.manifest_builder.settings import BuilderSettings, load_settings
from lambdas.manifest_builder.store import ObjectWriter, S3ObjectWriter
from lambdas.manifest_builder.surge import SurgeSignal

logger = Logger(service=SERVICE)
metrics = Metrics(service=SERVICE)


@cache
def _settings() -> BuilderSettings:
    return load_settings()


@cache
def _writer() -> ObjectWriter:
    client = boto3.client("s3", config=Config(retries={"max_attempts": 8, "mode": "adaptive"}))
    return S3ObjectWriter(client)


@cache
def _signal() -> SurgeSignal:
    s = _settings()
    # a short budget: the signal only hurries the control plane, it must not hold the batch up
    cfg = Config(connect_timeout=2, read_timeout=2, retries={"max_attempts": 2, "mode": "standard"})
    client = boto3.client("events", config=cfg) if s.surge_bytes > 0 else None
    return SurgeSignal(client, manifest_uri=source_uri(s.manifest_bucket, s.manifest_prefix), threshold=s.surge_bytes)


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """SQS event source mapping with ReportBatchItemFailures."""
    settings = _settings()
    metrics.namespace = settings.metrics_namespace
    result = build_manifests(event, settings=settings, writer=_writer())
    _signal().after(result)
    for d in result_datums(result):
        metrics.add_metric(name=d.name, unit=MetricUnit(d.unit), value=d.value)
    return result.response
