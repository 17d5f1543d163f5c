"""What a deploy costs a month: the prices and the load it is estimated at, named once.

Prices are AWS's us-east-1 on-demand list prices (most regions charge the same for these services;
check your region's pricing page), free tiers ignored. The load is the seed's design load: 200,000
NDJSON files and ~700 GB an hour, 24/7. Everything but the Glue job is an estimate that scales with
that load; each line says what it assumes. ``make plan`` and ``make deploy`` print the table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from contracts import metrics

if TYPE_CHECKING:
    from lambdas.control_plane.settings import ControlSettings

HOURS_PER_MONTH = 730  # AWS's pricing pages bill a month as 730 hours

# -- prices (us-east-1, USD) ------------------------------------------------------------------
GLUE_DPU_HOUR = 0.44  # AWS Glue pricing: Spark and streaming jobs, per DPU-hour, billed per second
# DPUs per worker (AWS Glue Developer Guide, "AWS Glue worker types"); contracts/glue.py lists the
# ones a streaming job may use
DPU_PER_WORKER = {"G.025X": 0.25, "G.1X": 1.0, "G.2X": 2.0, "G.4X": 4.0, "G.8X": 8.0}
LAMBDA_REQUEST = 0.20 / 1_000_000  # AWS Lambda pricing, x86, per request
LAMBDA_GB_SECOND = 0.0000166667  # AWS Lambda pricing, x86, first 6 billion GB-seconds a month
SQS_REQUEST = 0.40 / 1_000_000  # Amazon SQS pricing, standard queue, per request (64 KB chunk)
S3_PUT_REQUEST = 0.005 / 1000  # Amazon S3 pricing, S3 Standard: PUT, COPY, POST, LIST
S3_GET_REQUEST = 0.0004 / 1000  # Amazon S3 pricing, S3 Standard: GET, SELECT and the rest
S3_STANDARD_GB_MONTH = 0.023  # Amazon S3 pricing, S3 Standard, first 50 TB a month
CW_METRIC_MONTH = 0.30  # Amazon CloudWatch pricing, custom metric (first 10,000)
CW_PUT_METRIC_DATA_REQUEST = 0.01 / 1000  # Amazon CloudWatch pricing, PutMetricData
CW_ALARM_MONTH = 0.10  # Amazon CloudWatch pricing, standard-resolution alarm metric
ANOMALY_ALARM_METRICS = 3  # Amazon CloudWatch pricing: an anomaly detection alarm is 3 alarm metrics
CW_DASHBOARD_MONTH = 3.00  # Amazon CloudWatch pricing, dashboard (beyond the first 3)
KMS_KEY_MONTH = 1.00  # AWS KMS pricing, customer managed key
DYNAMODB_WRITE = 0.625 / 1_000_000  # Amazon DynamoDB pricing, on-demand, per write request unit (1 KB)
DYNAMODB_READ = 0.125 / 1_000_000  # Amazon DynamoDB pricing, on-demand, per read request unit (4 KB)
DYNAMODB_GB_MONTH = 0.25  # Amazon DynamoDB pricing, Standard table class, storage per GB-month
KEY_STATE_BYTES = 300  # a key's item in the key index (glue_processor/keys/state.py): under 1 KB

# -- the seed's load, and what the pipeline does per unit of it --------------------------------
FILES_PER_HOUR = 200_000
GB_PER_HOUR = 700
DESIGN_BYTES_PER_S = GB_PER_HOUR * 1e9 / 3600  # ~194 MB/s
MANIFEST_FILES = 1000  # files per SQS batch and per manifest (SqsBatchSize, MaxManifestFiles defaults)
MANIFEST_LAMBDA_SECONDS = 2.0  # assumed duration of one invocation (a 1,000-message batch)
MANIFEST_LAMBDA_GB = 0.5  # its MemorySize (template: 512 MB)
CONTROL_PLANE_TICKS_PER_HOUR = 30  # rate(2 minutes), plus a few job-state events
CONTROL_PLANE_SECONDS = 3.0  # assumed duration of a tick
CONTROL_PLANE_GB = 0.25  # its MemorySize (template: 256 MB)
SQS_MESSAGES_PER_RECEIVE = 10  # Lambda's poller receives, and deletes, up to 10 messages a call
OUTPUT_RATIO = 0.2  # assumed Parquet bytes per NDJSON byte (columnar, compressed)
PARQUET_FILE_MB = 128  # TargetFileMb's default
PUTS_PER_PARQUET_FILE = 50  # 8 staged parts, then the packed file, each in boto3's 8 MiB multipart parts
GETS_PER_PARQUET_FILE = 10  # the staged parts read back to pack them
BATCHES_PER_HOUR = 120  # a 30 s trigger (TriggerIntervalSeconds' default)
BOOKKEEPING_PUTS_PER_BATCH = 30  # checkpoint, commit record, Iceberg metadata, manifest lists, LISTs
BOOKKEEPING_GETS_PER_BATCH = 30
PUT_METRIC_DATA_PER_BATCH = 2  # the job's metric publisher batches up to 1,000 datums a call


@dataclass(frozen=True)
class Line:
    item: str
    at_min: float
    at_load: float  # at the workers the control plane sizes the design load at
    at_max: float
    basis: str


def _design_sizing(values: Mapping[str, str]) -> ControlSettings:
    """The control plane's sizing settings of the stack's ``values`` alone (not the caller's
    environment): ``WorkerMbPerSecond``, ``LatencySlaSeconds``, ``TriggerIntervalSeconds``."""
    from lambdas.control_plane.settings import ControlSettings

    fields = ControlSettings.model_fields
    return ControlSettings.model_construct(
        worker_mb_s=float(values.get("WorkerMbPerSecond", fields["worker_mb_s"].default)),
        latency_sla_s=float(values.get("LatencySlaSeconds", fields["latency_sla_s"].default)),
        trigger_interval_s=int(values.get("TriggerIntervalSeconds", fields["trigger_interval_s"].default)),
    )


def design_workers(values: Mapping[str, str]) -> int:
    """The workers the control plane scales to for the design load, within ``MinWorkers`` and
    ``MaxWorkers``: its need-based sizing of a scale-up (a steady arrival, a trigger's worth waiting,
    the resize's dead time), at the stack's sizing settings (:func:`_design_sizing`).
    ``WorkerMbPerSecond=0`` (sizing by utilization alone) has no such size: ``MaxWorkers``."""
    from lambdas.control_plane.decision import Observation, need

    low, high = sorted((int(values.get("MinWorkers", "2")), int(values.get("MaxWorkers", "10"))))
    sizing = _design_sizing(values)
    rate, trigger = DESIGN_BYTES_PER_S, float(sizing.trigger_interval_s)
    waiting = Observation(arrival_bytes_per_s=[rate] * 3, backlog_bytes=[rate * trigger], backlog_age_s=[trigger])
    workers, _ = need(waiting, sizing, resizing=True, keep_up=rate)
    return min(high, max(low, workers))


def estimate(values: Mapping[str, str], *, alarms: int, anomaly_alarms: int = 0, tables: int = 1) -> list[Line]:
    """The monthly cost lines at ``MinWorkers``, at the design load's size and at ``MaxWorkers`` for
    the stack's parameter ``values`` (``WorkerType``, ``MinWorkers``, ``MaxWorkers``,
    ``WorkerMbPerSecond``), with ``alarms`` static-threshold alarms
    and ``anomaly_alarms`` anomaly detection alarms created."""
    worker = values.get("WorkerType", "G.1X")
    dpu = DPU_PER_WORKER[worker]
    low, high = int(values.get("MinWorkers", "2")), int(values.get("MaxWorkers", "10"))
    month = HOURS_PER_MONTH

    def same(item: str, cost: float, basis: str) -> Line:
        return Line(item, cost, cost, cost, basis)

    load = design_workers(values)

    invocations = FILES_PER_HOUR / MANIFEST_FILES * month
    ticks = CONTROL_PLANE_TICKS_PER_HOUR * month
    lambdas = invocations * (LAMBDA_REQUEST + MANIFEST_LAMBDA_SECONDS * MANIFEST_LAMBDA_GB * LAMBDA_GB_SECOND)
    lambdas += ticks * (LAMBDA_REQUEST + CONTROL_PLANE_SECONDS * CONTROL_PLANE_GB * LAMBDA_GB_SECOND)
    # each file: S3's SendMessage of its event, then a tenth of a ReceiveMessage and of a DeleteMessageBatch
    sqs = FILES_PER_HOUR * (1 + 2 / SQS_MESSAGES_PER_RECEIVE) * month * SQS_REQUEST
    parquet_files = GB_PER_HOUR * 1024 * OUTPUT_RATIO / PARQUET_FILE_MB
    manifests = FILES_PER_HOUR / MANIFEST_FILES
    puts = parquet_files * PUTS_PER_PARQUET_FILE + 2 * manifests + BATCHES_PER_HOUR * BOOKKEEPING_PUTS_PER_BATCH
    gets = FILES_PER_HOUR + parquet_files * GETS_PER_PARQUET_FILE + manifests
    gets += BATCHES_PER_HOUR * BOOKKEEPING_GETS_PER_BATCH
    s3 = (puts * S3_PUT_REQUEST + gets * S3_GET_REQUEST) * month
    series = len(metrics.ALL) + tables * sum(1 for m in metrics.ALL if m.per_table)
    cw = series * CW_METRIC_MONTH + BATCHES_PER_HOUR * PUT_METRIC_DATA_PER_BATCH * month * CW_PUT_METRIC_DATA_REQUEST
    # an anomaly detection alarm is priced as three alarm metrics: the metric and its band's two
    cw += (alarms + ANOMALY_ALARM_METRICS * anomaly_alarms) * CW_ALARM_MONTH + CW_DASHBOARD_MONTH
    return [
        Line(
            f"Glue job ({worker}, {dpu:g} DPU/worker)",
            low * dpu * GLUE_DPU_HOUR * month,
            load * dpu * GLUE_DPU_HOUR * month,
            high * dpu * GLUE_DPU_HOUR * month,
            f"workers x {dpu:g} DPU x ${GLUE_DPU_HOUR}/DPU-hour x {month} h (24/7); the design load's {load}: "
            + _design_basis(values),
        ),
        same(
            "Lambda (manifests, control plane)",
            lambdas,
            f"{invocations:,.0f} manifest invocations of {MANIFEST_LAMBDA_SECONDS:g} s at 512 MB; "
            f"{ticks:,} control-plane ticks of {CONTROL_PLANE_SECONDS:g} s at 256 MB",
        ),
        same("SQS requests", sqs, f"a send per file, a receive and a delete per {SQS_MESSAGES_PER_RECEIVE} files"),
        same(
            "S3 requests",
            s3,
            f"a GET per file; {parquet_files:,.0f} Parquet files/h (output {OUTPUT_RATIO:g} x input) of "
            f"{PUTS_PER_PARQUET_FILE} PUTs; {BOOKKEEPING_PUTS_PER_BATCH} PUTs and GETs per batch",
        ),
        same(
            "CloudWatch (metrics, alarms, dashboard)",
            cw,
            f"{series} custom metric series, {alarms + anomaly_alarms} alarms"
            + (f" ({anomaly_alarms} of anomaly detection, priced as {ANOMALY_ALARM_METRICS})" if anomaly_alarms else "")
            + ", 1 dashboard, PutMetricData per batch",
        ),
        same("KMS key", KMS_KEY_MONTH, "one customer managed key (requests: bucket keys, negligible)"),
        *_key_index(values),
    ]


def _design_basis(values: Mapping[str, str]) -> str:
    sizing = _design_sizing(values)
    if sizing.worker_mb_s == 0:
        return "WorkerMbPerSecond=0 sizes by utilization alone, so MaxWorkers is assumed"
    how = (
        "Glue's auto scaling sizes the job itself; priced at "
        if values.get("ScalingMode") == "glue-auto-scaling"
        else ""
    )
    return (
        f"{how}what the control plane scales {DESIGN_BYTES_PER_S / 1e6:.0f} MB/s to, at {sizing.worker_mb_s:g} MB/s "
        f"a worker within a {sizing.latency_sla_s:g} s SLA, the driver included"
    )


def mirrors(values: Mapping[str, str]) -> bool:
    """Whether the job keeps its key index (docs/mirror.md): an Iceberg table that replaces, tails or retracts."""
    iceberg = values.get("TableFormat", "iceberg") == "iceberg"
    return iceberg and (values.get("OnOverwrite", "replace") != "append" or values.get("OnDelete") == "retract")


def _key_index(values: Mapping[str, str]) -> list[Line]:
    if not mirrors(values):
        return []
    per_month = FILES_PER_HOUR * HOURS_PER_MONTH
    cost = per_month * (DYNAMODB_WRITE + DYNAMODB_READ)
    return [
        Line(
            "DynamoDB key index (on-demand requests)",
            cost,
            cost,
            cost,
            f"a strongly consistent read and a write of under 1 KB per file ({per_month / 1e6:,.0f} million each)",
        )
    ]


def index_gb_per_month() -> float:
    """What a month of new keys adds to the key index (one item per key)."""
    return FILES_PER_HOUR * HOURS_PER_MONTH * KEY_STATE_BYTES / 1e9


def storage_per_month(gigabytes: float) -> float:
    """What ``gigabytes`` kept in S3 Standard cost a month."""
    return gigabytes * S3_STANDARD_GB_MONTH


def render(lines: list[Line], values: Mapping[str, str]) -> str:
    """The cost table as ``make plan`` prints it."""
    low, high = values.get("MinWorkers", "2"), values.get("MaxWorkers", "10")
    load = f"design load ({design_workers(values)})"
    head = ("monthly cost (estimate)", f"MinWorkers={low}", load, f"MaxWorkers={high}")
    rows = [[line.item, _usd(line.at_min), _usd(line.at_load), _usd(line.at_max)] for line in lines]
    rows.append(["total", *(_usd(sum(getattr(x, at) for x in lines)) for at in ("at_min", "at_load", "at_max"))])
    width = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    fmt = f"{{:<{width[0]}}}" + "".join(f"  {{:>{w}}}" for w in width[1:])
    out = [fmt.format(*head), fmt.format(*("-" * w for w in width)), *(fmt.format(*r) for r in rows)]
    out.append(
        f"us-east-1 list prices, {HOURS_PER_MONTH} h a month, free tiers ignored, at the design load of "
        f"{FILES_PER_HOUR:,} files and {GB_PER_HOUR} GB an hour (infra/prices.py). Assumed:"
    )
    out += [f"  {line.item}: {line.basis}" for line in lines]
    stored = GB_PER_HOUR * HOURS_PER_MONTH
    out.append(
        f"  not included, storage: each month of landing objects kept ({stored / 1024:,.0f} TB) adds "
        f"{_usd(storage_per_month(stored))}/month, of the table's files "
        f"{_usd(storage_per_month(stored * OUTPUT_RATIO))}/month"
        + (
            f", of the key index {_usd(index_gb_per_month() * DYNAMODB_GB_MONTH)}/month"
            f" ({index_gb_per_month():,.0f} GB)"
            if mirrors(values)
            else ""
        )
    )
    return "\n".join(out)


def _usd(value: float) -> str:
    return f"${math.floor(value * 100 + 0.5) / 100:,.2f}"
