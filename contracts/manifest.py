"""The manifest: a versioned JSON document listing NDJSON objects to load as one unit.

The manifest Lambda writes manifests; the Glue job reads them. Both import this module, so the
format is defined in exactly one place. A manifest's name is derived from its content, which
makes writing it idempotent: a retried Lambda invocation rewrites the same object.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contracts.exceptions import ManifestError
from contracts.validation import describe

# 2 adds ``version_id``; version 1 manifests (without it) are still read.
# The largest object S3 can hold: 10,000 parts of at most 5 GiB (Amazon S3 User Guide, "Amazon S3
# objects overview": objects up to 50 TB, 53.7 TB exactly). A larger size in an event is not an S3
# object's: refused, so no sum or metric of sizes can overflow (10**309 made float() raise), and a
# manifest's total stays a number of at most 20 digits in its name (contracts.layout).
MAX_OBJECT_BYTES = 10_000 * 5 * 1024**3
SCHEMA_VERSION: Literal[2] = 2


class ManifestEntry(BaseModel):
    """One S3 object to load: where it is, which version, and when S3 reported it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bucket: str = Field(min_length=3, max_length=255)
    key: str = Field(min_length=1, max_length=1024)
    size: int = Field(ge=0, le=MAX_OBJECT_BYTES)
    etag: str = Field(min_length=1, max_length=128)
    event_time: datetime
    sequencer: str | None = None
    # The S3 version the event names (versioned buckets); the job reads exactly this version, or,
    # without one, the object only while its eTag is still this one.
    version_id: str | None = Field(default=None, max_length=1024)
    # "removed": the key was deleted (s3:ObjectRemoved; never a lifecycle expiration): nothing to read,
    # and a table with on_delete retract removes its rows (docs/mirror.md). Left out of a manifest when
    # "created" (to_json), so a job of a build before it reads every manifest of created objects.
    event: Literal["created", "removed"] = "created"

    @property
    def removed(self) -> bool:
        return self.event == "removed"

    @field_validator("event_time")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("event_time must carry a time zone")
        return value.astimezone(UTC)

    @property
    def identity(self) -> tuple[str, str, str]:
        """(bucket, key, eTag): the content of an object; the unit of de-duplication (two versions
        with the same bytes are loaded once)."""
        return (self.bucket, self.key, self.etag)


def manifest_id_of(entries: Iterable[ManifestEntry]) -> str:
    """The content hash of a set of entries: sha256 over their identities, order-independent."""
    digest = hashlib.sha256()
    for bucket, key, etag in sorted(entry.identity for entry in entries):
        for part in (bucket, key, etag):
            digest.update(part.encode("utf-8"))
            digest.update(b"\x00")
        digest.update(b"\x01")
    return digest.hexdigest()


class Manifest(BaseModel):
    """A bounded group of objects, loaded by the job in one parallel read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1, 2] = SCHEMA_VERSION
    manifest_id: str = Field(pattern=r"^[0-9a-f]{64}$")
    file_count: int = Field(ge=1)
    total_bytes: int = Field(ge=0)
    entries: tuple[ManifestEntry, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        if self.file_count != len(self.entries):
            raise ValueError(f"file_count {self.file_count} != {len(self.entries)} entries")
        if self.total_bytes != sum(e.size for e in self.entries):
            raise ValueError("total_bytes does not equal the sum of entry sizes")
        if len({e.identity for e in self.entries}) != len(self.entries):
            raise ValueError("an object version (bucket, key, eTag) is listed twice")
        if self.manifest_id != manifest_id_of(self.entries):
            raise ValueError("manifest_id does not match the entries")
        return self

    @classmethod
    def of(cls, entries: Iterable[ManifestEntry]) -> Manifest:
        """Build a manifest from entries; the result does not depend on their order."""
        ordered = tuple(sorted(entries, key=lambda e: e.identity))
        return cls(
            manifest_id=manifest_id_of(ordered),
            file_count=len(ordered),
            total_bytes=sum(e.size for e in ordered),
            entries=ordered,
        )

    @property
    def earliest_event_time(self) -> datetime:
        return min(e.event_time for e in self.entries)

    def to_json(self) -> bytes:
        """Canonical bytes: the same manifest always serialises to the same bytes (an entry's event
        only when it is not "created")."""
        data = self.model_dump(mode="json")
        for entry in data["entries"]:
            if entry.get("event") == "created":
                del entry["event"]
        return json.dumps(data, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json(cls, payload: bytes | str, *, source: str = "<manifest>") -> Manifest:
        """Parse and validate a manifest; raise :class:`ManifestError` naming the source."""
        try:
            return cls.model_validate_json(payload)
        except ValidationError as exc:
            raise ManifestError(f"invalid manifest {source}: {describe(exc)}") from exc
