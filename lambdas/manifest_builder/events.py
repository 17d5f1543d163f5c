"""Reading S3 event notifications out of SQS message bodies (pure functions, no I/O)."""

from __future__ import annotations

import json
from datetime import datetime
from urllib.parse import unquote_plus

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.manifest import ManifestEntry
from lambdas.manifest_builder.exceptions import NotificationError


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class S3ObjectRef(_Lenient):
    key: str
    size: int = 0
    eTag: str | None = None
    sequencer: str | None = None


class S3BucketRef(_Lenient):
    name: str


class S3Detail(_Lenient):
    bucket: S3BucketRef
    object: S3ObjectRef


class S3EventRecord(_Lenient):
    eventName: str
    eventTime: datetime
    s3: S3Detail


class S3Notification(_Lenient):
    """The JSON S3 puts in an SQS message body (only the fields this pipeline needs)."""

    Records: list[S3EventRecord] = Field(default_factory=list)


def parse_body(body: str) -> list[S3EventRecord]:
    """Return the ObjectCreated records of one SQS body; [] for ``s3:TestEvent``.

    Raises :class:`NotificationError` for a body that is not an S3 notification, so the
    message fails alone and, after its retries, lands on the dead-letter queue.
    """
    try:
        raw = json.loads(body)
    except json.JSONDecodeError as exc:
        raise NotificationError(f"message body is not JSON: {exc}") from exc
    if isinstance(raw, dict) and raw.get("Event") == "s3:TestEvent":
        return []
    if not isinstance(raw, dict) or "Records" not in raw:
        raise NotificationError("message body is not an S3 event notification (no 'Records')")
    try:
        notification = S3Notification.model_validate(raw)
    except ValidationError as exc:
        raise NotificationError(f"malformed S3 event notification: {exc.errors()[0]['msg']}") from exc
    return [r for r in notification.Records if r.eventName.startswith("ObjectCreated:")]


def to_entry(record: S3EventRecord) -> ManifestEntry:
    """A manifest entry for one record; keys arrive form-encoded ('+' is a space)."""
    obj = record.s3.object
    if not obj.eTag:
        raise NotificationError(f"ObjectCreated event without eTag for s3://{record.s3.bucket.name}/{obj.key}")
    return ManifestEntry(
        bucket=record.s3.bucket.name,
        key=unquote_plus(obj.key),
        size=obj.size,
        etag=obj.eTag.strip('"'),
        event_time=record.eventTime,
        sequencer=obj.sequencer,
    )
