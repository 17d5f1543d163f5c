"""Reading S3 object-created (and object-removed) events out of SQS message bodies (pure functions).

A body arrives in one of the shapes AWS delivers to SQS:

- an S3 event notification (S3 -> SQS, and S3 -> SNS -> SQS with raw message delivery): ``Records``
  with ``s3.object.key`` URL-encoded (S3 User Guide, "Event message structure");
- an SNS notification envelope (S3 -> SNS -> SQS without raw delivery): ``Type: Notification`` and
  the S3 event notification as the JSON string ``Message`` (SNS Developer Guide, "Amazon SNS message
  and JSON formats");
- an EventBridge event (S3 -> EventBridge -> SQS): ``source: aws.s3``, ``detail-type: Object
  Created``, ``detail.object.key`` not encoded (S3 User Guide, "EventBridge message structure").

``s3:TestEvent`` (S3's check when a notification is configured) is skipped however it is wrapped.

A deletion (``ObjectRemoved:Delete``, ``ObjectRemoved:DeleteMarkerCreated``; EventBridge ``Object
Deleted``) is listed too, as a removed entry, with the version it removed for good (``Delete`` on a
versioned bucket, EventBridge's ``Permanently Deleted``) or none (a delete marker hides the key): a
table with ``on_delete: retract`` removes the key's rows (docs/mirror.md). The stack subscribes to
them only when a table asks. An expiration by the bucket's lifecycle is never one: S3 reports it as
``LifecycleExpiration:*`` (not subscribed), and EventBridge as ``Object Deleted`` with ``reason:
Lifecycle Expiration``, which is skipped (S3 User Guide, "Event notification types" and "EventBridge
event message structure").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import unquote_plus

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from contracts.manifest import ManifestEntry
from contracts.validation import describe
from lambdas.manifest_builder.exceptions import NotificationError


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class S3ObjectRef(_Lenient):
    key: str
    size: int = 0
    eTag: str | None = None
    versionId: str | None = None
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
    """The JSON S3 sends (only the fields this pipeline needs)."""

    Records: list[S3EventRecord] = Field(default_factory=list)


class _EBObject(_Lenient):
    key: str
    size: int = 0
    etag: str | None = Field(default=None, validation_alias=AliasChoices("etag", "eTag"))
    version_id: str | None = Field(default=None, alias="version-id")
    sequencer: str | None = None


class _EBDetail(_Lenient):
    bucket: S3BucketRef
    object: _EBObject
    reason: str | None = None  # Object Deleted: DeleteObject, or Lifecycle Expiration
    # Object Deleted: "Delete Marker Created" (the key hidden) or "Permanently Deleted" (one version)
    deletion_type: str | None = Field(default=None, alias="deletion-type")


class EventBridgeS3Event(_Lenient):
    source: str
    detail_type: str = Field(alias="detail-type")
    time: datetime
    detail: _EBDetail


@dataclass(frozen=True)
class CreatedObject:
    """One object-created event, whatever envelope it came in; ``key`` is decoded."""

    bucket: str
    key: str
    size: int
    etag: str | None
    version_id: str | None
    sequencer: str | None
    event_time: datetime
    removed: bool = False  # a deletion of the key (not an expiration by the bucket's lifecycle)


def parse_body(body: str) -> list[CreatedObject]:
    """The object-created events of one SQS body ([] for a test event or another event type).

    Raises :class:`NotificationError` for a body that is none of the shapes above, so the message
    fails alone and, after its retries, lands on the dead-letter queue.
    """
    try:
        raw = json.loads(body)
    except json.JSONDecodeError as exc:
        raise NotificationError(f"message body is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise NotificationError("message body is not a JSON object")
    if "Message" in raw and (raw.get("Type") == "Notification" or "TopicArn" in raw):  # SNS, raw delivery off
        try:
            raw = json.loads(raw["Message"])
        except (TypeError, json.JSONDecodeError) as exc:
            raise NotificationError(f"SNS notification whose Message is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise NotificationError("SNS notification whose Message is not a JSON object")
    if raw.get("Event") == "s3:TestEvent":
        return []
    if raw.get("source") == "aws.s3" and "detail-type" in raw:
        return _from_eventbridge(raw)
    if "Records" in raw:
        return _from_notification(raw)
    raise NotificationError(
        "message body is not an S3 event notification, an SNS envelope of one, or an EventBridge S3 event"
    )


def _from_notification(raw: dict[str, Any]) -> list[CreatedObject]:
    try:
        notification = S3Notification.model_validate(raw)
    except ValidationError as exc:
        raise NotificationError(f"malformed S3 event notification: {exc.errors()[0]['msg']}") from exc
    return [
        CreatedObject(
            bucket=r.s3.bucket.name,
            key=unquote_plus(r.s3.object.key),  # notifications form-encode keys ('+' is a space)
            size=r.s3.object.size,
            etag=r.s3.object.eTag,
            # a delete marker's version id is the marker's own: the deletion is of the key, not of
            # a version; ObjectRemoved:Delete names the version it removed for good
            version_id=None if r.eventName == "ObjectRemoved:DeleteMarkerCreated" else r.s3.object.versionId,
            sequencer=r.s3.object.sequencer,
            event_time=r.eventTime,
            removed=r.eventName.startswith("ObjectRemoved:"),
        )
        for r in notification.Records
        if r.eventName.startswith(("ObjectCreated:", "ObjectRemoved:"))
    ]


def _from_eventbridge(raw: dict[str, Any]) -> list[CreatedObject]:
    try:
        event = EventBridgeS3Event.model_validate(raw)
    except ValidationError as exc:
        raise NotificationError(f"malformed EventBridge S3 event: {exc.errors()[0]['msg']}") from exc
    removed = event.detail_type == "Object Deleted"
    if not (event.detail_type == "Object Created" or removed):
        return []
    if removed and event.detail.reason == "Lifecycle Expiration":  # the user's retention, not a delete
        return []
    obj = event.detail.object
    return [
        CreatedObject(
            bucket=event.detail.bucket.name,
            key=obj.key,  # EventBridge events carry the key as it is
            size=obj.size,
            etag=obj.etag,
            version_id=None if event.detail.deletion_type == "Delete Marker Created" else obj.version_id,
            sequencer=obj.sequencer,
            event_time=event.time,
            removed=removed,
        )
    ]


def to_entry(created: CreatedObject) -> ManifestEntry:
    """A manifest entry for one event."""
    if created.removed:
        # nothing to read: no size, no eTag (S3 reports none); its identity is the deletion's own
        mark = created.sequencer or created.event_time.isoformat()
        try:
            return ManifestEntry(
                bucket=created.bucket,
                key=created.key,
                size=0,
                etag=f"removed-{mark}"[:128],
                event_time=created.event_time,
                sequencer=created.sequencer,
                version_id=created.version_id if created.version_id not in (None, "null") else None,
                event="removed",
            )
        except ValidationError as exc:
            where = f"s3://{created.bucket[:255]}/{created.key[:1024]}"
            raise NotificationError(f"object-removed event for {where} cannot be listed: {describe(exc)}") from exc
    if not created.etag:
        raise NotificationError(f"object-created event without eTag for s3://{created.bucket}/{created.key}")
    try:
        return ManifestEntry(
            bucket=created.bucket,
            key=created.key,
            size=created.size,
            etag=created.etag.strip('"'),
            event_time=created.event_time,
            sequencer=created.sequencer,
            version_id=created.version_id if created.version_id not in (None, "null") else None,
        )
    except ValidationError as exc:  # a size no S3 object has, a key over 1,024 characters, ...
        where = f"s3://{created.bucket[:255]}/{created.key[:1024]}"
        raise NotificationError(f"object-created event for {where} cannot be listed: {describe(exc)}") from exc
