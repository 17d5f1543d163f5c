"""How much data the manifest Lambda wrote lately, from a listing of the manifest prefix alone: each
manifest's name ends with the data bytes it references (``contracts.layout``), so no GET is made."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from contracts.layout import manifest_data_bytes, normalise_prefix
from lambdas.control_plane.exceptions import ControlPlaneError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = Logger(service="control-plane", child=True)

# A manifest's name starts with its earliest event's time; it is written within the SQS batching
# window (300 s at most) of it, or later when the queue lags. The listing starts at the names of this
# long before ``since``, or before the signal's own oldest event (a queue hours behind), so it stays a
# few pages whatever the prefix holds.
NAME_LEAD = timedelta(minutes=15)
# At most this many manifests are read (50 pages, a few seconds). The listing is in name order, so a
# cut drops the newest: it is logged, and the sum is a lower bound.
MAX_LISTED = 50_000


class S3ManifestListing:
    def __init__(self, client: S3Client, bucket: str, prefix: str) -> None:
        self.client, self.bucket, self.prefix = client, bucket, normalise_prefix(prefix)

    def written_since(self, since: datetime, *, named_from: datetime | None = None) -> list[tuple[datetime, float]]:
        """(LastModified, data bytes) of the manifests S3 says were written after ``since``."""
        first = min(since, named_from) if named_from is not None else since
        start = f"{self.prefix}{(first - NAME_LEAD).strftime('%Y%m%dT%H%M%SZ')}"
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix, StartAfter=start, PaginationConfig={"MaxItems": MAX_LISTED}
        )
        written: list[tuple[datetime, float]] = []
        listed = 0
        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    listed += 1
                    size = manifest_data_bytes(obj["Key"])
                    if size is not None and obj["LastModified"] > since:
                        written.append((obj["LastModified"], float(size)))
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(f"listing s3://{self.bucket}/{self.prefix} failed: {exc}") from exc
        if listed >= MAX_LISTED:
            logger.warning("manifest listing cut: the newest are not counted", extra={"listed": listed, "start": start})
        return written
