"""The job's configuration: one frozen model, parsed once in ``main()``.

On Glue the values arrive as job arguments (``--manifest_uri s3://...``); locally as the same
command-line flags. Unknown or malformed settings fail at start-up with a message naming the
setting and what it accepts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contracts.column_names import MAX_DATA_COLUMNS
from contracts.exceptions import ConfigError
from contracts.metrics import DEFAULT_NAMESPACE
from contracts.routing import AfterLoad, OnDelete, OnOverwrite, TableName, not_reserved
from contracts.validation import describe
from glue_processor.defaults import DEFAULT_MAX_COLUMNS

MIB = 1024 * 1024
DEFAULT_PARTITION_LIMIT = 10_000
# What the job reads and writes from Python (its tasks, the driver's listings: shared/objects.py) is on
# S3 or a local disk; Spark's checkpoint may also be on HDFS.
_URI = r"^(s3|s3a|file)://.+"
_CHECKPOINT_URI = r"^(s3|s3a|file|hdfs)://.+"
# Glue passes its own arguments too (--JOB_NAME, --enable-metrics, --TempDir, ...). Ours are
# lower_snake_case; an unknown lower_snake_case argument is a typo and fails start-up.
_OURS = re.compile(r"^[a-z][a-z0-9_]*$")


class JobSettings(BaseModel):
    """Every setting of the streaming job, with its default."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    manifest_uri: str = Field(pattern=_URI, description="directory the manifest Lambda writes to")
    output_uri: str = Field(pattern=_URI, description="Parquet dataset root")
    quarantine_uri: str = Field(pattern=_URI, description="root of quarantined records (JSON lines)")
    checkpoint_uri: str = Field(pattern=_CHECKPOINT_URI, description="Structured Streaming checkpoint")
    table_format: Literal["iceberg", "hive-parquet"] = Field(
        default="iceberg",
        description="iceberg: an Apache Iceberg table at <output_uri>/<table_name>, one snapshot per batch; "
        "hive-parquet: plain Parquet files under <output_uri>/dt=<day>/",
    )
    catalog: str = Field(
        default="",
        pattern=r"^$|^glue$|^sqlite:///.+",
        description="Iceberg catalog: glue (the Glue Data Catalog), sqlite:///<path> (an embedded SQL catalog), "
        "or empty: glue for s3:// output, sqlite:///<output>/_catalog/catalog.db for local output",
    )
    database: str = Field(default="ingest", pattern=r"^[a-z0-9_]{1,255}$", description="Iceberg/Glue database")
    schema_uri: str = Field(
        default="",
        alias="schema",
        pattern=r"^$|^(s3|file)://.+",
        description="a declared-schema file (JSON: column -> type; see glue_processor/shared/declared.py); "
        "empty: every column is a string",
    )
    expect_uri: str = Field(
        default="",
        alias="expect",
        pattern=r"^$|^(s3|file)://.+",
        description="a rules file (JSON: rule name -> SQL, or -> {sql, on_fail: quarantine|drop|warn}; see "
        "glue_processor/shared/rules.py): what each record must keep; empty: no rules",
    )
    partition_by: str = Field(
        default="",
        description="Iceberg partition transforms over columns, comma-separated: day(ts), hour(ts), month(ts), "
        "year(ts), identity(col) or col (not of a declared double); empty: day(_ingest_time)",
    )
    snapshot_retention_hours: int = Field(
        default=6,
        ge=1,
        le=24 * 30,
        description="the job expires the Iceberg snapshots of every table it writes older than this, keeps the "
        "newest of each 1/32 of this window and the newest 10, and deletes the files only the others held: the "
        "one expiry of its tables (time travel reaches this far back, to within 1/32 of it; replaced files stay "
        "this long)",
    )
    table_name: TableName = Field(
        default="events",
        description="Iceberg/Glue table (with --routes, the routing file names the tables instead)",
    )
    routes_uri: str = Field(
        default="",
        alias="routes",
        pattern=r"^$|^(s3|file)://.+",
        description="a routing file (JSON, see contracts/routing.py): object keys to tables, each with its own "
        "declared columns, partitioning, file size and column bound; empty: every object to --table_name",
    )
    load_history_table: Annotated[str, AfterValidator(not_reserved)] = Field(
        default="load_history",
        pattern=r"^[a-z0-9_]{0,255}$",
        description="Iceberg table (same database) of every object version a batch accepted, with its outcome, "
        "rows, batch and snapshot, appended with the batch ('' for none; iceberg only)",
    )
    quarantine_table: Annotated[str, AfterValidator(not_reserved)] = Field(
        default="quarantine",
        pattern=r"^[a-z0-9_]{0,255}$",
        description="Iceberg table (same database) of every quarantined line, object and manifest: the table it "
        "was meant for, where, why, its raw text's first 64 KiB; appended with the batch ('' for none; iceberg only)",
    )
    on_overwrite: OnOverwrite | None = Field(
        default=None,
        description="a new version of a key the table loaded: replace (its rows in the commit that adds the new "
        "ones), tail (only the lines it adds at the end, when it extends the one loaded; else replace) or append "
        "(both versions in full); empty: replace (iceberg), append (hive-parquet, which can only append)",
    )
    on_delete: OnDelete = Field(
        default="keep",
        description="a deleted key (s3:ObjectRemoved): its rows stay (keep) or go in the next batch (retract; "
        "lifecycle expirations never retract)",
    )
    after_load: AfterLoad = Field(
        default="keep",
        description="a landing object once the commit that loaded it is published: kept, moved under "
        "--archive_prefix (archive) or deleted (delete); never one quarantined whole",
    )
    archive_prefix: str = Field(
        default="archive/", pattern=r"^[^/].*/$", description="where after_load=archive moves objects (same bucket)"
    )
    key_index: str = Field(
        default="",
        pattern=r"^$|^sqlite:///.+|^dynamodb:[A-Za-z0-9_.-]{3,255}$",
        description="where the job keeps each key's loaded version and where its rows are (replace, tail, retract): "
        "dynamodb:<table> on AWS, sqlite:///<path> locally; empty: sqlite:///<output>/_index/keys.db",
    )
    max_rewrite_mb_per_batch: int = Field(
        default=8192,
        ge=1,
        description="most data files (MiB) a batch rewrites to remove replaced or retracted rows; past it the "
        "objects that would need more wait for the next batch (carried over in a manifest), nothing lost",
    )
    checkpoint_rotate_manifests: int = Field(
        default=0, ge=0, description="start a new checkpoint generation after this many manifests (0: never)"
    )
    manifest_archive_uri: str | None = Field(
        default=None, pattern=_URI, description="move processed manifests here (keeps the listing small)"
    )
    source_uri_template: str = Field(
        default="s3://{bucket}/{key}", description="how a manifest entry becomes a readable URI"
    )
    allowed_buckets: tuple[str, ...] = Field(default=(), description="buckets manifests may point at; empty allows any")
    allowed_prefixes: tuple[str, ...] = Field(
        default=(), description="key prefixes manifests may point at; empty allows any"
    )
    dedupe_window_hours: int = Field(
        default=24, ge=0, le=24 * 30, description="an object version ingested this recently is not ingested again"
    )
    max_partitions_per_batch: int = Field(
        default=1000,
        ge=1,
        description="partitions a batch is expected to touch at most: past it, every row is still written exactly "
        "once, the batch is slower (a file, a merge and a manifest entry per partition), and PartitionsPastBound "
        "alarms",
    )
    partition_limit_per_batch: int = Field(
        default=DEFAULT_PARTITION_LIMIT,
        ge=1,
        description="the most partitions a table's share of a batch writes (unset: 10000, or "
        "max_partitions_per_batch when that is more): past it, the rows of its smallest partitions go to the null "
        "partition, their partition values kept in _extra under their keys (never lost; PartitionOverflowRecords "
        "alarms), so a partition source of unbounded cardinality cannot make every batch a file per value",
    )
    max_open_files_per_task: int = Field(
        default=64,
        ge=1,
        le=1000,
        description="partition files a parse task keeps open at once (partitions with 256 KiB or more in a "
        "spill; smaller ones share one file per task); past it the least recently written is finished and its "
        "partition's later rows start another part (merged into one file per partition)",
    )
    max_batch_attempts: int = Field(
        default=3, ge=1, le=100, description="failed attempts after which a batch's manifests are quarantined"
    )
    publish_hold_seconds: int = Field(
        default=120,
        ge=0,
        le=3600,
        description="how long a batch retries a table's publication before setting it aside (retried every batch "
        "after, DeferredPublications alarms) so that the other tables and the next batches go on",
    )
    max_deferred_publications: int = Field(
        default=2880,
        ge=0,
        le=100_000,
        description="table shares set aside at most (2880: a day of batches at a 30 s trigger); past it a batch "
        "waits for its publication as long as it takes (0: never set aside; with one table, never either)",
    )
    query_name: str = Field(default="ndjson-to-parquet", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    trigger: Literal["processing-time", "available-now"] = "processing-time"
    trigger_interval_seconds: int = Field(default=30, ge=1, le=3600)
    max_files_per_trigger: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="most manifests per micro-batch (an upper bound; the count follows the manifests' data bytes "
        "to the byte budget)",
    )
    max_bytes_per_trigger: int = Field(
        default=16 * 1024 * MIB,
        ge=0,
        description="byte budget of a micro-batch: data bytes its manifests may reference, counted by the bytes "
        "that end their names (0: no budget)",
    )
    max_manifest_bytes: int = Field(
        default=1024 * MIB, ge=1, description="the most data bytes one manifest references (the Lambda's bound)"
    )
    max_columns: int = Field(
        default=DEFAULT_MAX_COLUMNS,
        ge=1,
        le=MAX_DATA_COLUMNS,
        description="most data columns the table gets from the keys it finds (first seen first); values of other "
        "keys go to the _extra map column; at most what one Glue UpdateTable carries (contracts/column_names.py)",
    )
    target_file_mb: int = Field(default=128, ge=1, le=2048)
    max_file_mb: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="largest object (stored bytes) a batch takes; larger ones are quarantined",
    )
    max_object_mb: int = Field(
        default=20480,
        ge=1,
        description="most text (decompressed MiB) read from one object; the rest is quarantined, naming the line",
    )
    max_line_mb: int = Field(default=256, ge=1, le=2048, description="longest line (MiB); longer lines are quarantined")
    job_name: str = Field(default="local", min_length=1, description="JobName dimension of the metrics")
    metrics_namespace: str = Field(default=DEFAULT_NAMESPACE, pattern=r"^[^:][\x20-\x7e]{0,254}$")
    metrics_sinks: tuple[Literal["cloudwatch", "jsonl"], ...] = Field(
        default=("cloudwatch",), description="comma-separated: cloudwatch, jsonl (or empty for none)"
    )
    metrics_jsonl_path: str | None = Field(default=None, description="local file for the jsonl sink")

    @field_validator("allowed_buckets", "allowed_prefixes", "metrics_sinks", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        return value

    @field_validator("manifest_uri", "output_uri", "quarantine_uri", "checkpoint_uri")
    @classmethod
    def _dir(cls, value: str) -> str:
        return value.rstrip("/")

    @model_validator(mode="before")
    @classmethod
    def _limit_above_bound(cls, values: Any) -> Any:
        # unset, the limit is never under the alarm's bound (a job raised past 10000 before the limit
        # existed keeps every partition it wrote)
        if isinstance(values, dict) and "partition_limit_per_batch" not in values:
            try:
                bound = int(values.get("max_partitions_per_batch", 0))
            except (TypeError, ValueError):
                return values  # the bound's own check names it
            return {**values, "partition_limit_per_batch": max(DEFAULT_PARTITION_LIMIT, bound)}
        return values

    @model_validator(mode="after")
    def _template(self) -> JobSettings:
        if self.checkpoint_rotate_manifests and not self.manifest_archive_uri:
            raise ValueError(
                "checkpoint_rotate_manifests needs manifest_archive_uri "
                "(a new generation must not re-list old manifests)"
            )
        if self.partition_by and self.table_format != "iceberg":
            raise ValueError("partition_by needs table_format iceberg (hive-parquet partitions by dt=<ingest day>)")
        if self.routes_uri and self.table_format != "iceberg":
            raise ValueError("routes needs table_format iceberg (hive-parquet writes one table)")
        if self.partition_limit_per_batch < self.max_partitions_per_batch:
            raise ValueError(
                "partition_limit_per_batch must be at least max_partitions_per_batch (the bound that alarms first)"
            )
        if self.table_format != "iceberg" and (self.on_overwrite not in (None, "append") or self.on_delete != "keep"):
            raise ValueError("on_overwrite replace or tail, and on_delete retract, need table_format iceberg")
        if self.load_history_table and self.load_history_table == self.table_name:
            raise ValueError("load_history_table must differ from table_name")
        if self.quarantine_table and self.quarantine_table in (self.table_name, self.load_history_table):
            raise ValueError("quarantine_table must differ from table_name and load_history_table")
        if "jsonl" in self.metrics_sinks and not self.metrics_jsonl_path:
            raise ValueError("metrics_sinks includes jsonl: set metrics_jsonl_path")
        if "{bucket}" not in self.source_uri_template or "{key}" not in self.source_uri_template:
            raise ValueError("source_uri_template must contain {bucket} and {key}")
        roots = [self.output_uri, self.quarantine_uri, self.checkpoint_uri, self.manifest_uri]
        if self.manifest_archive_uri:
            roots.append(self.manifest_archive_uri.rstrip("/"))
        for i, a in enumerate(roots):
            for b in roots[i + 1 :]:
                if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
                    raise ValueError(
                        f"{a} and {b} overlap: manifest, output, quarantine and checkpoint "
                        "locations must be separate directories"
                    )
        return self

    @property
    def metric_dimensions(self) -> dict[str, str]:
        return {"JobName": self.job_name, "QueryName": self.query_name}

    @property
    def files_per_trigger(self) -> int:
        """Manifests per micro-batch when none wait to count by: full ones (``max_manifest_bytes``),
        so this many reference at most ``max_bytes_per_trigger``. The running query's count follows
        the waiting manifests' data bytes (``glue_processor.intake``)."""
        if not self.max_bytes_per_trigger:
            return self.max_files_per_trigger
        return max(1, min(self.max_files_per_trigger, self.max_bytes_per_trigger // self.max_manifest_bytes))

    @property
    def overwrite_mode(self) -> OnOverwrite:
        """on_overwrite as it applies: replace on an Iceberg table unless set, append on hive-parquet."""
        if self.on_overwrite is not None:
            return self.on_overwrite
        return "replace" if self.table_format == "iceberg" else "append"

    @property
    def key_index_uri(self) -> str:
        """Where the keys' state is kept (see ``key_index``)."""
        if self.key_index:
            return self.key_index
        if self.output_uri.startswith("file://"):
            return f"sqlite:///{self.output_uri.removeprefix('file://')}/_index/keys.db"
        raise ValueError("key_index: give dynamodb:<table> for an s3:// output (the stack does)")

    @property
    def catalog_uri(self) -> str:
        """The Iceberg catalog this job commits to (see ``catalog``)."""
        if self.catalog:
            return self.catalog
        if self.output_uri.startswith("file://"):
            return f"sqlite:///{self.output_uri.removeprefix('file://')}/_catalog/catalog.db"
        return "glue"

    @property
    def table_location(self) -> str:
        """The Iceberg table's location: its own directory, apart from the ledger (``_commits`` and
        the other ``_`` directories), which orphan-file clean-up must never see."""
        return self.location_of(self.table_name)

    def location_of(self, table: str) -> str:
        """Where a table of the job lives (every routed table too): ``<output_uri>/<table>``."""
        return f"{self.output_uri}/{table}"

    @property
    def target_file_bytes(self) -> int:
        return self.target_file_mb * MIB

    def source_uri_of(self, bucket: str, key: str) -> str:
        return self.source_uri_template.replace("{bucket}", bucket).replace("{key}", key)


def settings_from_mapping(values: dict[str, str]) -> JobSettings:
    """Validate raw string settings; raise :class:`ConfigError` naming each bad setting."""
    names = {f.alias or name for name, f in JobSettings.model_fields.items()}
    unknown = sorted(set(values) - names)
    if unknown:
        allowed = ", ".join(sorted(names))
        raise ConfigError(f"unknown setting(s) {', '.join('--' + u for u in unknown)}; allowed: {allowed}")
    try:
        return JobSettings.model_validate(values)
    except ValidationError as exc:
        problems = describe(exc, name=_flag_with_hint, root="settings")
        raise ConfigError(f"invalid job configuration: {problems}") from exc


def _flag_with_hint(field: str) -> str:
    hint = JobSettings.model_fields[field].description if field in JobSettings.model_fields else None
    return f"--{field}" + (f" ({hint})" if hint else "")


def ours_from_argv(argv: Sequence[str]) -> dict[str, str]:
    """Pick ``--name value`` pairs that belong to this job out of a Glue or local argv."""
    values: dict[str, str] = {}
    items = list(argv)
    i = 0
    while i < len(items):
        token = items[i]
        if token.startswith("--"):
            name, _, inline = token[2:].partition("=")
            if inline or "=" in token:
                value, step = inline, 1
            elif i + 1 < len(items) and not items[i + 1].startswith("--"):
                value, step = items[i + 1], 2
            elif _OURS.match(name):
                raise ConfigError(f"--{name} needs a value")
            else:  # Glue's own, whose value may itself look like a flag (--python-modules-installer-option --no-index)
                value, step = "", 1
            if _OURS.match(name):
                values[name] = value
            i += step
        else:
            i += 1
    return values
