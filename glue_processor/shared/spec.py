"""What the driver hands one parse task (the objects or byte ranges it reads, and how it writes
them), and what the task finds in each (:class:`FileOutcome`).

The contract between the batch's plan (:mod:`glue_processor.plan.tasks`, :mod:`glue_processor.plan.ranges`)
and the task (:mod:`glue_processor.read.task`); the task's Parquet parts
(:mod:`glue_processor.read.parts`) read their sizes, partitions and conversion from it too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime

from glue_processor.defaults import DEFAULT_MAX_COLUMNS
from glue_processor.shared.declared import DeclaredSchema
from glue_processor.shared.names import column_names
from glue_processor.shared.partitioning import PartitionPlan
from glue_processor.shared.rules import Rules
from glue_processor.shared.text import Limits


@dataclass(frozen=True)
class FileTask:
    read_uri: str
    source_uri: str
    etag: str
    event_time: datetime
    manifest_uri: str
    version_id: str | None = None
    item: int = 0  # the object's place in the batch (two versions of one key share a URI)
    # a large plain object is read by several tasks: the lines that start in bytes [start, end),
    # numbered from first_line (see glue_processor/plan/ranges.py); end None: to the end of the object
    start: int = 0
    end: int | None = None
    first_line: int = 1

    @property
    def ranged(self) -> bool:
        """One of several byte ranges of its object (not the whole of it)."""
        return self.start > 0 or self.end is not None


@dataclass(frozen=True)
class TaskSpec:
    index: int
    files: tuple[FileTask, ...]
    known: tuple[str, ...]
    data_dir: str
    quarantine_dir: str
    batch_id: int
    ingest_time: datetime
    target_bytes: int
    # Arrow bytes per Parquet row group; also the step in which a file grows toward the target.
    row_group_bytes: int = 32 * 1024 * 1024
    # Row groups a file is written in at least (a file stops within half a row group of the target).
    row_groups_per_file: int = 4
    max_open_files: int = 64  # partition files a task keeps open at once (see ParquetParts._write)
    # How an object is read: chunks of whole lines, the longest line, the most text (see shared/text.py).
    limits: Limits = field(default_factory=Limits)
    # Declared column types (--schema): converted here, what does not convert goes to _rescued.
    declared: DeclaredSchema | None = None
    # The table's rules (glue_processor/shared/rules.py), checked here on the typed rows.
    rules: Rules | None = None
    # Partitions from the record: each row's partition, so each file holds one (None: one partition).
    partitions: PartitionPlan | None = None
    # The most partitions whose rows the task keeps apart; any other's join the null partition here
    # (see ParquetParts._within_limit), so what a task reports is bounded whatever its input.
    partition_limit: int | None = None
    # The most data columns (known keys included); values of keys past it go to the _extra map.
    max_columns: int = DEFAULT_MAX_COLUMNS
    # Keys of the table's shares set aside, not known yet: a column only where a row has that very
    # key, and no other case of one is (see Memory.held_keys).
    held: tuple[str, ...] = ()

    @functools.cached_property
    def _names(self) -> list[tuple[str, str]]:
        """The columns of the table's keys and of those held for its shares set aside."""
        return column_names((*self.known, *self.held))

    @functools.cached_property
    def taken(self) -> frozenset[str]:
        """The table's keys (and those held for its shares set aside), the names of their columns and
        of its time partitions, lower-cased: a new key that is another case of either goes to _extra
        (``KIND__2`` next to a known ``kind`` named ``kind__2`` would rename it too)."""
        return (
            frozenset(k.lower() for k in (*self.known, *self.held))
            | {name.lower() for _, name in self._names}
            | {name.lower() for name in self.partition_names}
        )

    @property
    def partition_names(self) -> tuple[str, ...]:
        """The names of the table's time partition fields (``ingest_day``, ``ts_day``): Iceberg lets
        no column share one, so a key of such a name goes to _extra."""
        fields = self.partitions.fields if self.partitions is not None else ()
        return tuple(f.name for f in fields if f.transform != "identity")

    @functools.cached_property
    def exact(self) -> frozenset[str]:
        """The held keys a row may still make columns: those whose column is named as the key (a
        held ``kind`` named ``kind__2``, next to a held ``Kind``, would be named ``kind`` here)."""
        held = set(self.held)
        return frozenset(k for k, name in self._names if k in held and name == k)


# What a task found in one object (or byte range) it was handed: the driver's outcome of it too
# when the planner could not hand it on (a range that could not be framed)
@dataclass(frozen=True)
class FileOutcome:
    read_uri: str
    status: str
    good: int = 0
    bad: int = 0
    text_bytes: int = 0
    new_keys: tuple[str, ...] = ()
    reason: str | None = None
    start: int = 0  # the byte range read (FileTask.start/end)
    end: int | None = None
    item: int = 0  # FileTask.item
    violations: tuple[tuple[str, int], ...] = ()  # rows that broke each rule (of those that some did)
    dropped: int = 0  # rows a drop rule removed
