"""A key's state in one table: the version loaded, where its rows are, how far its text was read.

Ordering versions: S3 gives each PUT and DELETE event of a key a ``sequencer``, "a string
representation of a hexadecimal value"; of two events on the same key, the greater is the later
(Amazon S3 User Guide, "Event message structure": left-pad the shorter with zeros, then compare).
An entry without one (a local file, a backfill) is ordered by its event time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# a key's rows in more segments than this are gathered back into one (its next version is loaded whole)
MAX_SEGMENTS = 64


class _Frozen(BaseModel):
    # a field a later build adds is read past: a build rolled back to this one still reads its states
    model_config = ConfigDict(frozen=True, extra="ignore")


class Segment(_Frozen):
    """Rows of the key one batch committed: their batch, the partitions their files are in (each
    ``{"spec": id, "values": [...]}``, JSON; empty: not known, every partition is looked at), and the
    first line they hold (a tail's rows start past the lines loaded before)."""

    query_id: str
    batch_id: int
    partitions: tuple[str, ...] = ()
    from_line: int = 1


class KeyState(_Frozen):
    """What a table holds of one key."""

    table: str
    bucket: str
    key: str
    version_id: str | None = None
    etag: str
    sequencer: str | None = None
    event_time: datetime
    segments: tuple[Segment, ...] = ()
    lines: int = 0  # lines read of the version (a torn last line included)
    text_bytes: int = 0  # bytes of its text through its last line end: where an appended version goes on
    prefix_sha256: str = ""  # of those bytes: an extension is verified against it, never assumed
    torn: bool = False  # its text ended without a line end: line ``lines`` is past ``text_bytes``
    retracted: bool = Field(default=False, description="a tombstone: deleted at this sequencer, no rows")
    # after_load moved or deleted it once loaded: the deletion event that causes is not a retraction
    archived: bool = False

    @property
    def ident(self) -> tuple[str, str, str]:
        return (self.table, self.bucket, self.key)

    def to_json(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> KeyState:
        return cls.model_validate_json(text)


def later(a_sequencer: str | None, a_time: datetime, b_sequencer: str | None, b_time: datetime) -> bool:
    """Whether event a happened after event b on the same key (their sequencers, else their times)."""
    if a_sequencer and b_sequencer:
        return _order(a_sequencer) > _order(b_sequencer)
    return a_time > b_time


def _order(sequencer: str) -> int:
    try:
        return int(sequencer, 16)  # left-padded with zeros and compared: the hexadecimal values' order
    except ValueError:  # not hexadecimal (not S3's): its text order
        return int.from_bytes(sequencer.encode()[:64].rjust(64, b"\0"), "big")


def partition_json(spec_id: int, values: list[Any]) -> str:
    """One partition of a segment, as kept: its spec and its values (dates and times as ISO text)."""
    import json

    return json.dumps({"spec": spec_id, "values": [v.isoformat() if hasattr(v, "isoformat") else v for v in values]})
