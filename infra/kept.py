"""What outlives the stack: the table's files (the output bucket), its catalog (the Glue database
and tables), the KMS key that encrypts them, and the key index (a DynamoDB table: each key's loaded
version and where its rows are, docs/mirror.md). ``make destroy`` keeps them together, and
``DROP_DATA=1`` removes them together: a catalog without its files, files without the key that
decrypts them, or a table whose keys' versions are forgotten (a later version would not replace the
rows of the one loaded) is what neither may leave.

The template marks the bucket, the key and the index ``DeletionPolicy: RetainExceptOnCreate``, as the
catalog: a stack delete keeps them, a rolled-back first create removes them (CloudFormation User
Guide, "DeletionPolicy attribute").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from infra import prices, teardown
from infra.exceptions import DeployError

BUCKET = "OutputBucket"
KEY = "Key"
INDEX = "KeyIndexTable"
DATABASE = "GlueDatabase"
# KMS waits 7 to 30 days before deleting a key; the longest leaves time to cancel (kms:CancelKeyDeletion)
KEY_PENDING_DAYS = 30
LIST_PAGES = 100  # a bucket without a CloudWatch size is measured by listing at most 100,000 versions


@dataclass(frozen=True)
class Kept:
    bucket: str | None
    key: str | None
    database: str
    tables: list[str] = field(default_factory=list)
    index: str | None = None  # the key index's DynamoDB table

    def describe(self) -> list[str]:
        out = [f"s3://{self.bucket} (the table's files)"] if self.bucket else []
        out += [f"Glue database {self.database} and its tables {', '.join(self.tables)}"] if self.database else []
        out += [f"DynamoDB table {self.index} (each key's loaded version)"] if self.index else []
        out += [f"KMS key {self.key} (it encrypts them)"] if self.key else []
        return out


def output_bucket_name(project: str, account: str, region: str) -> str:
    """The output bucket's name (the template's OutputBucket BucketName)."""
    return f"{project}-output-{account}-{region}"


def index_table_name(project: str) -> str:
    """The key index's table name (the template's KeyIndexTable TableName)."""
    return f"{project}-key-index"


def of_stack(resources: list[dict[str, str]], *, database: str, tables: list[str]) -> Kept:
    """What the stack keeps, by its resources' physical ids."""
    ids = {
        r["LogicalResourceId"]: r.get("PhysicalResourceId", "")
        for r in resources
        if r.get("ResourceStatus") != "DELETE_COMPLETE"
    }
    return Kept(
        bucket=ids.get(BUCKET) or None,
        key=ids.get(KEY) or None,
        database=database,
        tables=tables,
        index=ids.get(INDEX) or None,
    )


def left_by_a_destroyed_stack(
    s3: Any, bucket: str, database: str, tables: list[str], *, dynamodb: Any = None, index: str = ""
) -> Kept:
    """What an earlier ``make destroy`` kept: the bucket by its name, the key from the bucket's
    default encryption (the alias went with the stack), the catalog and the key index by their names."""
    key = None
    try:
        rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
        key = rules[0]["ApplyServerSideEncryptionByDefault"].get("KMSMasterKeyID")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in {"NoSuchBucket", "404"}:
            raise DeployError(f"get_bucket_encryption {bucket} failed: {exc}") from exc
        bucket = ""
    found = index_left_behind(dynamodb, index) if dynamodb is not None and index else None
    return Kept(bucket=bucket or None, key=key, database=database, tables=tables, index=index if found else None)


def index_left_behind(dynamodb: Any, name: str) -> str | None:
    """The key index an earlier stack of this name kept, if it exists."""
    try:
        dynamodb.describe_table(TableName=name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return None
        raise DeployError(f"describe_table {name} failed: {exc}") from exc
    return f"DynamoDB table {name}"


def index_gb(dynamodb: Any, name: str) -> float:
    """The key index's stored GB (DynamoDB updates TableSizeBytes about every six hours)."""
    try:
        return float(dynamodb.describe_table(TableName=name)["Table"].get("TableSizeBytes", 0)) / 1e9
    except ClientError:
        return 0.0


def bucket_left_behind(s3: Any, bucket: str) -> str | None:
    """The output bucket an earlier stack of this name kept, if it exists."""
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in {"404", "NoSuchBucket", "NotFound"}:
            return None
        raise DeployError(f"head_bucket {bucket} failed: {exc}") from exc
    return f"bucket s3://{bucket}"


def size_gb(s3: Any, cloudwatch: Any, bucket: str) -> tuple[float, bool]:
    """The bucket's stored bytes in GB, and whether that is all of them: S3's daily storage metric
    (BucketSizeBytes, every version; S3 User Guide, "Metrics and dimensions") when it has one,
    else a listing bounded at :data:`LIST_PAGES` pages (then "at least")."""
    now = datetime.now(UTC)
    try:
        points = cloudwatch.get_metric_statistics(
            Namespace="AWS/S3",
            MetricName="BucketSizeBytes",
            Dimensions=[{"Name": "BucketName", "Value": bucket}, {"Name": "StorageType", "Value": "StandardStorage"}],
            StartTime=now - timedelta(days=3),
            EndTime=now,
            Period=86400,
            Statistics=["Average"],
        )["Datapoints"]
    except ClientError:
        points = []
    if points:
        latest = max(points, key=lambda p: p["Timestamp"])
        return float(latest["Average"]) / 1024**3, True
    total, pages, token = 0, 0, None
    while pages < LIST_PAGES:
        args: dict[str, Any] = {"Bucket": bucket, **(token or {})}
        try:
            page = s3.list_object_versions(**args)
        except ClientError as exc:
            raise DeployError(f"listing s3://{bucket} failed: {exc}") from exc
        total += sum(v.get("Size", 0) for v in page.get("Versions", []))
        pages += 1
        if not page.get("IsTruncated"):
            return total / 1024**3, True
        token = {"KeyMarker": page["NextKeyMarker"], "VersionIdMarker": page["NextVersionIdMarker"]}
    return total / 1024**3, False


def report(kept: Kept, gigabytes: float, *, complete: bool, stack: str, index_gigabytes: float = 0.0) -> str:
    """What was kept and what it keeps costing a month (prices: :mod:`infra.prices`)."""
    storage = prices.storage_per_month(gigabytes) + (index_gigabytes * prices.DYNAMODB_GB_MONTH if kept.index else 0)
    key = prices.KMS_KEY_MONTH if kept.key else 0.0
    size = f"{gigabytes:,.2f} GB" if complete else f"at least {gigabytes:,.2f} GB"
    lines = ["kept (make destroy keeps the table's files, catalog and key together):"]
    if kept.bucket:
        price = f"S3 Standard, ${prices.S3_STANDARD_GB_MONTH}/GB-month"
        lines.append(f"  s3://{kept.bucket}: {size}, ${storage:,.2f}/month ({price})")
    if kept.database:
        lines.append(f"  Glue database {kept.database}, tables {', '.join(kept.tables)}: $0 (Data Catalog free tier)")
    if kept.index:
        price = f"${prices.DYNAMODB_GB_MONTH}/GB-month"
        lines.append(
            f"  DynamoDB table {kept.index}: {index_gigabytes:,.2f} GB, "
            f"${index_gigabytes * prices.DYNAMODB_GB_MONTH:,.2f}/month ({price})"
        )
    if kept.key:
        lines.append(f"  KMS key {kept.key}: ${key:,.2f}/month")
    lines.append(
        f"  in all about ${math.ceil((storage + key) * 100) / 100:,.2f}/month; "
        f"make destroy STACK={stack} DROP_DATA=1 removes them"
    )
    return "\n".join(lines)


def drop(s3: Any, glue: Any, kms: Any, kept: Kept, *, dynamodb: Any = None) -> None:
    """Remove what was kept, catalog first (nothing then points at deleted files), then the key
    index, the files and the bucket, then the key (scheduled: KMS deletes a key after a waiting
    period)."""
    if kept.database:
        table, *others = kept.tables or [""]
        teardown.drop_catalog(glue, kept.database, table, also=others)
    if kept.index and dynamodb is not None:
        delete_index(dynamodb, kept.index)
    if kept.bucket:
        teardown.stop_access_logs(s3, [kept.bucket])
        teardown.empty_bucket(s3, kept.bucket)
        delete_bucket(s3, kept.bucket)
    if kept.key:
        schedule_key_deletion(kms, kept.key)


def delete_index(dynamodb: Any, name: str) -> None:
    try:
        dynamodb.delete_table(TableName=name)
        print(f"  deleted DynamoDB table {name}")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise DeployError(f"delete_table {name} failed: {exc}") from exc


def delete_bucket(s3: Any, bucket: str) -> None:
    try:
        s3.delete_bucket(Bucket=bucket)
        print(f"  deleted s3://{bucket}")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NoSuchBucket":
            raise DeployError(f"delete_bucket {bucket} failed: {exc}") from exc


def schedule_key_deletion(kms: Any, key: str) -> None:
    try:
        meta = kms.describe_key(KeyId=key)["KeyMetadata"]
        if meta["KeyState"] in {"PendingDeletion", "PendingReplicaDeletion"}:
            return
        out = kms.schedule_key_deletion(KeyId=meta["KeyId"], PendingWindowInDays=KEY_PENDING_DAYS)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NotFoundException":
            return
        raise DeployError(f"scheduling the deletion of KMS key {key} failed: {exc}") from exc
    print(
        f"  KMS key {key} scheduled for deletion on {out['DeletionDate']:%Y-%m-%d} "
        f"(aws kms cancel-key-deletion --key-id {key} undoes it until then)"
    )
