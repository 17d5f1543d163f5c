"""The manifest builder's logic: SQS batch in, manifests out, partial failures reported."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from contracts.exceptions import StorageError
from contracts.layout import manifest_key
from lambdas.manifest_builder.batching import MessageEntries, plan_manifests
from lambdas.manifest_builder.events import parse_body, to_entry
from lambdas.manifest_builder.exceptions import NotificationError
from lambdas.manifest_builder.settings import BuilderSettings
from lambdas.manifest_builder.store import ObjectWriter

logger = Logger(service="manifest-builder", child=True)


@dataclass
class BuildResult:
    """What one invocation did; the handler returns ``response`` to Lambda."""

    response: dict[str, list[dict[str, str]]]
    manifests_written: list[str] = field(default_factory=list)
    objects: int = 0
    bytes: int = 0
    duplicates_dropped: int = 0
    rejected_records: int = 0
    ignored_objects: int = 0
    files_per_manifest: list[int] = field(default_factory=list)
    bytes_per_manifest: list[int] = field(default_factory=list)
    oldest_event: datetime | None = None  # the earliest event a written manifest is named after


class _Collector:
    """Record handler for powertools' BatchProcessor: one SQS message -> its accepted entries."""

    def __init__(self, settings: BuilderSettings) -> None:
        self.settings = settings
        self.accepted: dict[str, MessageEntries] = {}
        self.ignored = 0

    def __call__(self, record: SQSRecord) -> int:
        try:
            entries_of = [to_entry(event) for event in parse_body(record.body)]
        except NotificationError as exc:
            # the message fails alone (retried, then dead-lettered); say why where operators look
            logger.warning("message rejected", extra={"message_id": record.message_id, "reason": str(exc)[:2000]})
            raise
        entries = []
        for entry in entries_of:
            if self.settings.accepts(entry.key):
                entries.append(entry)
            else:
                self.ignored += 1
                logger.warning(
                    "object ignored: outside the prefix/suffix filter",
                    extra={
                        "bucket": entry.bucket,
                        "key": entry.key,
                        "source_prefix": self.settings.source_prefix,
                        "source_suffixes": list(self.settings.source_suffixes),
                    },
                )
        self.accepted[record.message_id] = MessageEntries(record.message_id, tuple(entries))
        return len(entries)


def build_manifests(event: Mapping[str, Any], *, settings: BuilderSettings, writer: ObjectWriter) -> BuildResult:
    """Turn an SQS batch of S3 notifications into manifests.

    A message that cannot be read fails alone (it is retried, then dead-lettered). A manifest
    that cannot be written fails exactly the messages packed into it. Everything else succeeds.
    """
    collector = _Collector(settings)
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    with processor(records=list(event.get("Records", [])), handler=collector):
        processor.process()
    failures: set[str] = {str(item["itemIdentifier"]) for item in processor.response()["batchItemFailures"]}
    rejected = len(failures)

    plan = plan_manifests(
        list(collector.accepted.values()),
        max_bytes=settings.max_manifest_bytes,
        max_files=settings.max_manifest_files,
    )
    result = BuildResult(response={}, duplicates_dropped=plan.duplicates_dropped, ignored_objects=collector.ignored)
    for planned in plan.manifests:
        manifest = planned.manifest
        key = manifest_key(settings.manifest_prefix, manifest)
        try:
            writer.put(settings.manifest_bucket, key, manifest.to_json(), content_type="application/json")
        except StorageError:
            logger.exception("manifest write failed", extra={"bucket": settings.manifest_bucket, "key": key})
            failures |= planned.message_ids
            continue
        logger.info(
            "manifest written",
            extra={
                "bucket": settings.manifest_bucket,
                "key": key,
                "files": manifest.file_count,
                "bytes": manifest.total_bytes,
            },
        )
        result.manifests_written.append(key)
        result.objects += manifest.file_count
        result.bytes += manifest.total_bytes
        result.files_per_manifest.append(manifest.file_count)
        result.bytes_per_manifest.append(manifest.total_bytes)
        oldest = manifest.earliest_event_time
        result.oldest_event = oldest if result.oldest_event is None else min(result.oldest_event, oldest)

    result.rejected_records = rejected
    result.response = {"batchItemFailures": [{"itemIdentifier": mid} for mid in sorted(failures)]}
    return result
