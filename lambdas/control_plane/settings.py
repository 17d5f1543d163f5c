"""The control plane's configuration, validated at cold start."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.exceptions import ConfigError
from contracts.glue import StreamingWorkerType
from contracts.metrics import DEFAULT_NAMESPACE
from contracts.routing import TableName
from contracts.validation import describe


class ControlSettings(BaseSettings):
    """Environment of the control-plane Lambda (and of ``make status`` locally)."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", case_sensitive=False)

    job_name: str = Field(min_length=1, description="the Glue streaming job to keep alive")
    query_name: str = Field(default="ndjson-to-parquet", description="QueryName dimension of the job's metrics")
    metrics_namespace: str = DEFAULT_NAMESPACE
    worker_type: StreamingWorkerType = "G.1X"
    min_workers: int = Field(
        default=2,
        ge=2,
        le=299,
        description="fewest workers (Glue needs at least 2); above MAX_WORKERS, the two are read as the "
        "range they span, and every decision says so",
    )
    max_workers: int = Field(default=10, ge=2, le=299, description="most workers the control plane sizes the job to")
    scaling_mode: Literal["control-plane", "glue-auto-scaling"] = "control-plane"
    scale_up_utilization: float = Field(default=0.8, gt=0, le=2)
    scale_down_utilization: float = Field(default=0.3, ge=0, lt=1)
    target_utilization: float = Field(default=0.6, gt=0, lt=1)
    backlog_age_up_s: float = Field(default=300, gt=0, description="backlog age that forces a scale-up")
    down_periods: int = Field(default=6, ge=1, description="low-utilization datapoints in a row before scaling down")
    cooldown_s: int = Field(default=900, ge=0, description="no scaling this soon after a (re)start")
    max_restarts: int = Field(default=5, ge=0, description="consecutive failed runs before giving up and alarming")
    restart_base_delay_s: int = Field(default=60, ge=0)
    restart_max_delay_s: int = Field(default=1800, ge=0)
    lookback_minutes: int = Field(default=30, ge=5, le=1440)
    worker_mb_s: float = Field(
        default=56.0,
        ge=0,
        description="data MB/s one worker processes (make sizing: per core x cores x scaling efficiency); "
        "> 0 sizes from the backlog and the arrival rate, 0 from utilization alone",
    )
    need_utilization: float = Field(
        default=0.85, gt=0, le=1, description="the share of a worker's measured rate the need-based sizing plans for"
    )
    # inclusive bounds: the stack's parameters take them as they are (CloudFormation's MinValue and
    # MaxValue are inclusive; infra/parameters.py); the job takes the same trigger as a whole 1..3600
    trigger_interval_s: int = Field(default=30, ge=1, le=3600, description="the job's processing-time trigger")
    max_files_per_trigger: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="the job's --max_files_per_trigger (the stack's MaxFilesPerTrigger): a run whose batch bound "
        "needs more full manifests is started with more",
    )
    latency_sla_s: float = Field(default=600, ge=1, description="the backlog age the sizing must stay under")
    resize_cost_s: float = Field(
        default=300,
        ge=0,
        description="seconds without processing a resize costs: the batch in flight (150 s at most, the batch "
        "bound), the end-of-run tick, Glue's start-up and the cold first batch (make autoscale: 120-280 s)",
    )
    manifest_service: str = Field(default="manifest-builder", description="the manifest Lambda's service dimension")
    stale_after_s: float = Field(default=300, gt=0, description="older backlog datapoints are not acted upon")
    state_bucket: str | None = Field(default=None, description="bucket of the control plane's state object")
    catalog_id: str | None = Field(default=None, description="the account of the table's Glue catalog")
    table_database: str | None = Field(
        default=None, description="database of the Iceberg table whose optimizers to watch"
    )
    table_name: TableName | None = Field(
        default=None, description="the Iceberg table whose optimizers to watch (unset: none)"
    )
    routes_uri: str | None = Field(
        default=None,
        pattern=r"^s3://[^/]+/.+",
        description="the job's routing file (s3://bucket/key): its tables' optimizers are created and watched too",
    )
    load_history_table: str | None = Field(
        default=None, description="the job's load-history table: its optimizers are created and watched too"
    )
    quarantine_table: str | None = Field(
        default=None, description="the job's quarantine table: its optimizers are created and watched too"
    )
    optimizer_role_arn: str | None = Field(
        default=None, description="the role of the optimizers the control plane creates (unset: it creates none)"
    )
    output_uri: str | None = Field(
        default=None, pattern=r"^s3://.+", description="the job's --output_uri: each table's files are under it"
    )
    orphan_retention_days: int = Field(default=3, ge=1, description="orphan-file optimizer: files older than this")
    state_key: str = "control-plane/state.json"
    manifest_bucket: str | None = Field(
        default=None, description="the manifests' bucket: a surge signal lists it (unset: surge signals are ignored)"
    )
    manifest_prefix: str = Field(default="manifests/", description="key prefix of the manifests")
    _misconfigured: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _ranges(self) -> ControlSettings:
        if self.min_workers > self.max_workers:
            # CloudFormation rules cannot compare two numbers, so a stack can be given the pair in
            # either order (make deploy refuses it, a console or CLI update does not); refusing it here
            # would fail every tick and no run would be restarted again: read it as the range it spans
            note = (
                f"MIN_WORKERS={self.min_workers} > MAX_WORKERS={self.max_workers}: "
                f"sizing within [{self.max_workers}, {self.min_workers}]"
            )
            lowest, highest = self.max_workers, self.min_workers
            object.__setattr__(self, "min_workers", lowest)  # frozen: set once, while validating
            object.__setattr__(self, "max_workers", highest)
            self._misconfigured = (note,)
        if not self.scale_down_utilization < self.target_utilization < self.scale_up_utilization:
            raise ValueError("need scale_down_utilization < target_utilization < scale_up_utilization (hysteresis)")
        return self

    @property
    def dimensions(self) -> dict[str, str]:
        return {"JobName": self.job_name, "QueryName": self.query_name}

    @property
    def misconfigured(self) -> tuple[str, ...]:
        """What was given wrong and how it is read instead (logged at cold start, in every decision)."""
        return self._misconfigured


def load_settings(**overrides: object) -> ControlSettings:
    try:
        return ControlSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = describe(exc, name=str.upper, root="settings")
        raise ConfigError(f"invalid control plane configuration: {problems}") from exc
