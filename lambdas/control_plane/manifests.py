"""How much data the manifest Lambda wrote lately, from a listing of the manifest prefix alone: each
manifest's name ends with the data bytes it references (``contracts.layout``), so no GET is made."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from contracts.layout import manifest_data_bytes, normalise_prefix
from lambdas.control_plane.exceptions import ControlPlaneError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# A manifest's name starts with its earliest event's time; it is written within the SQS batching
# window (300 s at most) of it, or later on a retry. Names older than this before ``since`` are not
# listed: a late retry is no surge, and the listing stays a page or two whatever the prefix holds.
NAME_LEAD = timedelta(minutes=15)
# At most this many manifests are read (10 pages; 10,000 manifests reference up to 10 TB at the
# default 1 GiB bound): past it the sum is a lower bound, a surge either way.
MAX_LISTED = 10_000


class S3ManifestListing:
    def __init__(self, client: S3Client, bucket: str, prefix: str) -> None:
        self.client, self.bucket, self.prefix = client, bucket, normalise_prefix(prefix)

    def written_since(self, since: datetime) -> list[tuple[datetime, float]]:
        """(LastModified, data bytes) of the manifests S3 says were written after ``since``."""
        start = f"{self.prefix}{(since - NAME_LEAD).strftime('%Y%m%dT%H%M%SZ')}"
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix, StartAfter=start, PaginationConfig={"MaxItems": MAX_LISTED}
        )
        written: list[tuple[datetime, float]] = []
        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    size = manifest_data_bytes(obj["Key"])
                    if size is not None and obj["LastModified"] > since:
                        written.append((obj["LastModified"], float(size)))
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(f"listing s3://{self.bucket}/{self.prefix} failed: {exc}") from exc
        return written
