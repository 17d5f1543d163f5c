"""The events AWS would produce, built locally: S3 notifications wrapped in SQS Lambda events."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote_plus

REGION = "us-east-1"
ACCOUNT = "123456789012"


@dataclass(frozen=True)
class CreatedObject:
    bucket: str
    key: str
    size: int
    etag: str
    event_time: datetime
    sequencer: str
    version_id: str | None = None
    removed: bool = False  # ObjectRemoved:Delete: the key was deleted (no size, no eTag)


def s3_notification(obj: CreatedObject) -> dict[str, Any]:
    """The JSON S3 sends for ObjectCreated:Put (or ObjectRemoved:Delete, which names no size or
    eTag); the key is form-encoded as S3 does it."""
    sized = {} if obj.removed else {"size": obj.size, "eTag": obj.etag}
    return {
        "Records": [
            {
                "eventVersion": "2.1",
                "eventSource": "aws:s3",
                "awsRegion": REGION,
                "eventTime": obj.event_time.strftime("%Y-%m-%dT%H:%M:%S.")
                + f"{obj.event_time.microsecond // 1000:03d}Z",
                "eventName": "ObjectRemoved:Delete" if obj.removed else "ObjectCreated:Put",
                "userIdentity": {"principalId": "AWS:LOCALPRODUCER"},
                "requestParameters": {"sourceIPAddress": "127.0.0.1"},
                "responseElements": {"x-amz-request-id": obj.sequencer, "x-amz-id-2": obj.etag},
                "s3": {
                    "s3SchemaVersion": "1.0",
                    "configurationId": "ndjson-landing",
                    "bucket": {
                        "name": obj.bucket,
                        "ownerIdentity": {"principalId": "LOCALOWNER"},
                        "arn": f"arn:aws:s3:::{obj.bucket}",
                    },
                    "object": {
                        "key": quote_plus(obj.key, safe="/"),
                        **sized,
                        "sequencer": obj.sequencer,
                        **({"versionId": obj.version_id} if obj.version_id else {}),
                    },
                },
            }
        ]
    }


def sqs_event(bodies: Sequence[dict[str, Any]], *, queue: str = "ndjson-landing-events") -> dict[str, Any]:
    """A Lambda SQS event, one message per body; message ids are stable for the same body."""
    records = []
    for body in bodies:
        text = json.dumps(body, separators=(",", ":"))
        records.append(
            {
                "messageId": str(uuid.uuid5(uuid.NAMESPACE_URL, text)),
                "receiptHandle": "local",
                "body": text,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "0", "SenderId": "s3"},
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(text.encode()).hexdigest(),  # noqa: S324 - as SQS does
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue}",
                "awsRegion": REGION,
            }
        )
    return {"Records": records}
