"""The batch commit record: what a committed micro-batch published, and from which objects.

The job writes one record per batch under ``<output>/_commits/<query_id>/``. Writing it is the
batch's commit point (see ``glue_processor.commit.ledger``); the records together are the ledger of
every object ever ingested, read by the local summary, ``make status`` and reconciliation.

A batch writes every table its objects are routed to (:mod:`contracts.routing`): the record holds
one :class:`TableShare` per table, each published (and counted) on its own. A record of schema
version 1 (one table, before routing) is read as one share of the table ``""``, which the job reads
as its ``--table_name``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# "deleted": a deletion of the key (an s3:ObjectRemoved event): nothing read; its table's rows of the
# key retracted (on_delete: retract) or kept (keep), as its reason says. "carried": left to a later
# batch, listed in a manifest the batch wrote (past --max_rewrite_mb_per_batch: docs/mirror.md)
SourceStatus = Literal[
    "ingested",
    "empty",
    "missing",
    "unreadable",
    "rejected",
    "duplicate",
    "superseded",
    "ignored",
    "deleted",
    "carried",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PublishedFile(_Frozen):
    staged: str
    final: str
    bytes: int = Field(ge=0)


class TextPrint(_Frozen):
    """What a table with ``on_overwrite: tail`` keeps of an object version's text, to tell a later
    version that only appends to it: its bytes through its last line end, their SHA-256, the line
    ends among them, and whether a torn last line (no line end) follows (docs/mirror.md)."""

    end: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    lines: int = Field(ge=0)
    torn: bool = False


class SourceRecord(_Frozen):
    """The outcome for one object version listed in a manifest of this batch."""

    bucket: str
    key: str
    etag: str
    size: int
    event_time: datetime
    manifest_uri: str
    status: SourceStatus
    records: int = 0
    bad_records: int = 0
    reason: str | None = None
    version_id: str | None = None  # the S3 version read (versioned buckets)
    table: str | None = None  # the table its route names (None: no table, e.g. ignored or a bad entry)
    # the S3 event's sequencer (the order of a key's versions: glue_processor/keys/state.py), for the
    # key index of a table that mirrors its bucket; left out of a record when None (record_json)
    sequencer: str | None = None
    # on_overwrite tail: the version's text print, and the first line this batch read of it (past 1:
    # it extends the version loaded before, whose rows stay); left out when None and 1
    text: TextPrint | None = None
    from_line: int = Field(default=1, ge=1)

    @property
    def identity(self) -> str:
        """The object version as one string (its eTag and version, which hold no space, first)."""
        return object_identity(self.bucket, self.key, self.etag, self.version_id)


def object_identity(bucket: str, key: str, etag: str, version_id: str | None) -> str:
    """An object version as one string, a key of BatchStats.object_violations."""
    return f"{etag} {version_id or '-'} s3://{bucket}/{key}"


class Stage:
    """The keys of :attr:`BatchStats.stage_s`: a batch's wall seconds by stage, as the job times them."""

    READ_PARSE_WRITE: Final = "read_parse_write"  # plan the parse tasks, run them: read, parse, stage parts
    WRITE: Final = "write"  # the parts into data files of about the target size
    REWRITE: Final = "rewrite"  # the files of rows a mirrored table retracts, rewritten without them
    WRITE_QUARANTINE: Final = "write_quarantine"
    # the parse tasks' seconds in the tables' rules, summed over the tasks (a part of READ_PARSE_WRITE)
    RULES: Final = "rules"
    # the stages the executors run: the work that scales with them
    PARALLEL: Final = (READ_PARSE_WRITE, WRITE)


class BatchStats(_Frozen):
    # figures a later version adds are left out here, not refused: a job rolled back to this version
    # still reads the records written since (the other models refuse what they do not know)
    model_config = ConfigDict(frozen=True, extra="ignore")

    manifests: int = 0
    bad_manifests: int = 0
    files: int = 0
    missing_files: int = 0
    unreadable_files: int = 0
    # objects read in part (their read stopped at a line, or a byte range could not be read): their
    # rows up to there loaded, the rest quarantined; a record leaves it out at 0 (record_json)
    partial_files: int = 0
    # rows of replaced or retracted versions the batch removed, and the bytes of the files it
    # rewrote to remove them (docs/mirror.md); a record leaves them out at 0 (record_json)
    rows_removed: int = 0
    rewrite_bytes: int = 0
    input_bytes: int = 0
    text_bytes: int = 0
    records_in: int = 0
    records_out: int = 0
    bad_records: int = 0
    rescued_values: int = 0  # values of declared columns that did not convert (kept in _rescued)
    extra_values: int = 0  # values kept in _extra: keys past max_columns or no column (see ndjson.parse_ndjson)
    null_partition_records: int = 0  # rows whose partition value was missing or did not convert
    # rows moved to the null partition (their partition values to _extra) past the share's
    # --partition_limit_per_batch; a record leaves it out at 0 (record_json)
    overflow_records: int = 0
    # rows drop rules removed, and rows that broke each rule of the share's table (a batch's own
    # figures leave the rules to its shares); a record leaves them out at 0 and empty (record_json)
    dropped_records: int = 0
    rule_violations: dict[str, int] = Field(default_factory=dict)
    # the same per object version (object_identity -> rule -> rows): here, not in SourceRecord, whose
    # model refuses what it does not know, so a job rolled back to a build before rules still reads
    # every record written since (this model ignores it)
    object_violations: dict[str, dict[str, int]] = Field(default_factory=dict)
    output_files: int = 0
    output_bytes: int = 0
    partitions: int = 0  # table partitions the batch's data files are in
    columns: int = 0
    duration_s: float = 0.0
    stage_s: dict[str, float] = Field(default_factory=dict)
    max_latency_s: float | None = None
    p95_latency_s: float | None = None

    @property
    def parallel_s(self) -> float:
        """The seconds of the stages the executors run (:attr:`Stage.PARALLEL`)."""
        return sum(self.stage_s.get(stage, 0.0) for stage in Stage.PARALLEL)


# Fields of BatchStats added after records were first written: a record leaves them out at 0 (its
# model forbids fields it does not know), so a job rolled back to the version before them still reads
# every record that has nothing to say in them.
OMITTED_AT_ZERO = ("overflow_records", "partial_files", "rows_removed", "rewrite_bytes", "dropped_records")
# Fields of TableShare added later, left out of a record when empty, for the same reason.
OMITTED_WHEN_EMPTY = ("replaced", "rewrites")


class Rewrite(_Frozen):
    """A data file of the table holding rows the batch removes, and the file of its other rows that
    takes its place in the same commit (None: no row of it is left)."""

    old: str
    new: PublishedFile | None = None
    rows_removed: int = Field(default=0, ge=0)
    old_bytes: int = Field(default=0, ge=0)


class Replaced(_Frozen):
    """An object version whose rows the batch removes: replaced by a later version of its key, or
    retracted (the key was deleted). Its rows go in the commit that adds the later version's."""

    bucket: str
    key: str
    etag: str
    version_id: str | None = None
    status: Literal["replaced", "retracted"] = "replaced"
    by_etag: str | None = None  # the version that replaces it
    by_version_id: str | None = None
    # where its rows are: the batches that wrote them, the partitions of their files (as the key
    # index keeps them: glue_processor/keys/state.py; empty: any), and its first line that goes
    batches: tuple[int, ...] = ()
    partitions: tuple[str, ...] = ()
    from_line: int = 1

    @property
    def source_uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


class TableShare(_Frozen):
    """What one batch wrote to one table: published on its own, exactly once (the table's snapshot
    summary names the query and the batch)."""

    table: str  # "" in a record of schema version 1: the job's --table_name
    data_files: tuple[PublishedFile, ...] = ()
    # The JSON keys known to the table when the batch was written (its columns); a restarted job
    # starts from them.
    keys: tuple[str, ...] = ()
    stats: BatchStats = Field(default_factory=BatchStats)
    # the catalog would refuse the share's schema change (checked before the record): its objects
    # are quarantined, nothing of it is published
    refused: str | None = None
    # a table that mirrors its bucket (docs/mirror.md): the versions whose rows go with this share,
    # and the files rewritten without them. Left out of a record when empty (record_json), so a job
    # rolled back to a build before them still reads every record that replaced nothing
    replaced: tuple[Replaced, ...] = ()
    rewrites: tuple[Rewrite, ...] = ()


class CommitRecord(_Frozen):
    schema_version: Literal[1, 2] = 2
    query_id: str
    batch_id: int = Field(ge=0)
    attempt: str
    committed_at: datetime
    partition: str
    manifests: tuple[str, ...]
    tables: tuple[TableShare, ...] = ()
    quarantine_files: tuple[PublishedFile, ...]
    sources: tuple[SourceRecord, ...]
    stats: BatchStats

    @model_validator(mode="before")
    @classmethod
    def _from_version_1(cls, data: Any) -> Any:
        """A version 1 record (one table: ``data_files`` and ``keys`` at the top) as one share."""
        if isinstance(data, dict) and ("data_files" in data or "keys" in data):
            data = dict(data)
            files, keys = data.pop("data_files", ()), data.pop("keys", ())
            if not data.get("tables"):
                data["tables"] = [{"table": "", "data_files": files, "keys": keys, "stats": data.get("stats", {})}]
        return data

    @property
    def data_files(self) -> tuple[PublishedFile, ...]:
        """Every data file of the batch, all tables."""
        return tuple(f for share in self.tables for f in share.data_files)

    def share(self, table: str) -> TableShare | None:
        return next((s for s in self.tables if s.table == table), None)

    def loaded_by(self, share: TableShare) -> tuple[SourceRecord, ...]:
        """The objects a share holds rows of (a version 1 record's sources name no table)."""
        loaded = ("ingested", "empty")
        if not share.table:
            return tuple(s for s in self.sources if s.status in loaded and s.table in (None, ""))
        return tuple(s for s in self.sources if s.status in loaded and s.table == share.table)

    def without(self, abandoned: dict[str, str]) -> CommitRecord:
        """The record as it stands once the shares of ``abandoned`` (table -> why) were abandoned:
        their objects ``rejected`` with the reason, nothing of them loaded, their keys not learnt."""
        if not abandoned:
            return self
        gone = {id(s) for share in self.tables if share.table in abandoned for s in self.loaded_by(share)}
        table_of = {id(s): share.table for share in self.tables for s in self.loaded_by(share)}
        sources = tuple(
            s.model_copy(update={"status": "rejected", "records": 0, "reason": abandoned[table_of[id(s)]]})
            if id(s) in gone
            else s
            for s in self.sources
        )
        tables = tuple(
            s.model_copy(update={"refused": abandoned[s.table], "data_files": ()}) if s.table in abandoned else s
            for s in self.tables
        )
        return self.model_copy(update={"sources": sources, "tables": tables})


def record_json(record: CommitRecord) -> bytes:
    """The record as the ledger writes it: the fields of OMITTED_AT_ZERO left out of its figures and
    of its shares' where they are 0."""
    data = record.model_dump(mode="json")
    for stats in [data["stats"], *(share["stats"] for share in data["tables"])]:
        for name in OMITTED_AT_ZERO:
            if stats.get(name) == 0:
                del stats[name]
        for name in ("rule_violations", "object_violations"):
            if not stats.get(name):
                stats.pop(name, None)
    for share in data["tables"]:
        for name in OMITTED_WHEN_EMPTY:
            if not share.get(name):
                share.pop(name, None)
    for source in data["sources"]:
        for name, default in (("sequencer", None), ("text", None), ("from_line", 1)):
            if source.get(name) == default:
                source.pop(name, None)
    return json.dumps(data, indent=1, ensure_ascii=False).encode()
