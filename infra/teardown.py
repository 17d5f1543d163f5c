"""``make destroy EMPTY=1``: quiet the stack, then empty its buckets so the delete can finish.

Order matters: while the schedule restarts the job, the event source mapping writes manifests and
the job writes Parquet, emptying a bucket never ends. So: disable the EventBridge rules and the
event source mappings, stop the job's runs and wait, stop access logging, then empty every bucket
(all versions and delete markers), the access-log bucket last. A rule or mapping already gone (a
failed create's rollback removed it) is nothing to disable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infra.exceptions import DeployError

ACTIVE_RUNS = {"STARTING", "RUNNING", "STOPPING", "WAITING"}
DELETE_BATCH = 1000  # DeleteObjects takes at most 1000 keys


@dataclass(frozen=True)
class Clients:
    events: Any
    lambda_: Any
    glue: Any
    s3: Any


def quiet(
    clients: Clients,
    resources: list[dict[str, str]],
    *,
    wait_s: float = 900,
    poll_s: float = 15,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Disable rules and event source mappings, stop job runs and wait until none is active."""
    for rule in _of(resources, "AWS::Events::Rule"):
        print(f"  disable rule {rule}")
        _call(clients.events.disable_rule, f"disable rule {rule}", gone_ok=True, Name=rule)
    for uuid in _of(resources, "AWS::Lambda::EventSourceMapping"):
        print(f"  disable event source mapping {uuid}")
        _call(
            clients.lambda_.update_event_source_mapping,
            f"disable mapping {uuid}",
            gone_ok=True,
            UUID=uuid,
            Enabled=False,
        )
    for job in _of(resources, "AWS::Glue::Job"):
        stop_runs(clients.glue, job, wait_s=wait_s, poll_s=poll_s, sleep=sleep)


def stop_runs(glue: Any, job: str, *, wait_s: float, poll_s: float, sleep: Callable[[float], None]) -> None:
    """Stop every active run of ``job`` and wait (at most ``wait_s``) until none is active."""
    active = _active_runs(glue, job)
    if active:
        print(f"  stop {len(active)} run(s) of Glue job {job}")
        out = _call(glue.batch_stop_job_run, f"stop runs of {job}", JobName=job, JobRunIds=active)
        for err in out.get("Errors", []):
            print(f"  warning: {err.get('JobRunId')}: {err.get('ErrorDetail', {}).get('ErrorMessage')}")
    waited = 0.0
    while active := _active_runs(glue, job):
        if waited >= wait_s:
            raise DeployError(f"Glue job {job} still has active runs after {wait_s:.0f}s: {', '.join(active)}")
        sleep(poll_s)
        waited += poll_s


def empty_buckets(s3: Any, buckets: list[str]) -> None:
    """Stop access logging, then empty every bucket; buckets that receive logs go last."""
    targets = stop_access_logs(s3, buckets)
    for bucket in sorted(buckets, key=lambda b: b in targets):
        empty_bucket(s3, bucket)


def stop_access_logs(s3: Any, buckets: list[str]) -> set[str]:
    """Turn off the server access logging of ``buckets``; returns the buckets that received them."""
    targets: set[str] = set()
    for bucket in buckets:
        try:
            logging = s3.get_bucket_logging(Bucket=bucket).get("LoggingEnabled")
        except ClientError as exc:
            if _missing(exc):
                continue
            raise DeployError(f"get_bucket_logging {bucket} failed: {exc}") from exc
        if logging:
            targets.add(logging["TargetBucket"])
            _call(s3.put_bucket_logging, f"stop access logs of {bucket}", Bucket=bucket, BucketLoggingStatus={})
    return targets


def holding_objects(s3: Any, buckets: list[str]) -> list[str]:
    """The ``buckets`` that exist and hold at least one object version or delete marker (S3 refuses
    to delete those: DeleteBucket, "BucketNotEmpty", S3 API Reference)."""
    out = []
    for bucket in buckets:
        try:
            page = s3.list_object_versions(Bucket=bucket, MaxKeys=1)
        except ClientError as exc:
            if _missing(exc):
                continue
            raise DeployError(f"listing s3://{bucket} failed: {exc}") from exc
        if page.get("Versions") or page.get("DeleteMarkers"):
            out.append(bucket)
    return out


def empty_bucket(s3: Any, bucket: str) -> int:
    """Delete every object version and delete marker; returns how many were deleted."""
    print(f"  empty s3://{bucket}")
    deleted = 0
    try:
        # Always list from the start: a marker-based next page after deleting the previous page is
        # not something to rely on, and each round deletes what it listed.
        while True:
            page = s3.list_object_versions(Bucket=bucket, MaxKeys=DELETE_BATCH)
            keys = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
            ][:DELETE_BATCH]
            if not keys:
                return deleted
            out = s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
            if out.get("Errors"):
                first = out["Errors"][0]
                raise DeployError(
                    f"s3://{bucket}: {len(out['Errors'])} object(s) not deleted, first "
                    f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )
            deleted += len(keys)
    except ClientError as exc:
        if _missing(exc):
            return deleted
        raise DeployError(f"emptying s3://{bucket} failed: {exc}") from exc


def _active_runs(glue: Any, job: str) -> list[str]:
    runs: list[dict[str, Any]] = []
    try:
        for page in glue.get_paginator("get_job_runs").paginate(JobName=job):
            runs.extend(page["JobRuns"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "EntityNotFoundException":
            return []
        raise DeployError(f"get_job_runs {job} failed: {exc}") from exc
    return [r["Id"] for r in runs if r["JobRunState"] in ACTIVE_RUNS]


def _of(resources: list[dict[str, str]], resource_type: str) -> list[str]:
    return [
        r["PhysicalResourceId"]
        for r in resources
        if r["ResourceType"] == resource_type
        and r.get("PhysicalResourceId")
        and r.get("ResourceStatus") != "DELETE_COMPLETE"
    ]


def buckets_of(resources: list[dict[str, str]]) -> list[str]:
    return _of(resources, "AWS::S3::Bucket")


def _call(fn: Callable[..., Any], what: str, *, gone_ok: bool = False, **kwargs: Any) -> Any:
    try:
        return fn(**kwargs)
    except ClientError as exc:
        if gone_ok and exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            print(f"  {what}: already gone")
            return {}
        raise DeployError(f"{what} failed: {exc}") from exc
    except BotoCoreError as exc:
        raise DeployError(f"{what} failed: {exc}") from exc


def _missing(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") in {"NoSuchBucket", "404"}


def catalog_left_behind(glue: Any, database: str) -> str | None:
    """The Glue database an earlier stack kept (it outlives its stack), if it exists."""
    if not database:
        return None
    try:
        glue.get_database(Name=database)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "EntityNotFoundException":
            return None
        raise DeployError(f"get_database {database} failed: {exc}") from exc
    return f"Glue database {database}"


# The job's load history and quarantine, tables it creates beside its own (JobSettings.load_history_table's
# and quarantine_table's defaults).
LOAD_HISTORY = "load_history"
QUARANTINE = "quarantine"


def routed_tables(s3: Any, uri: str) -> list[str]:
    """The tables a routing file (the stack's RoutesUri) names; [] without one."""
    if not uri:
        return []
    from contracts.exceptions import ConfigError
    from contracts.routing import read_routing

    try:
        return list(read_routing(s3, uri).tables)
    except ConfigError as exc:
        raise DeployError(f"reading the routing file (its tables are to be dropped): {exc}") from exc


def drop_catalog(glue: Any, database: str, table: str, *, also: Sequence[str] = ()) -> None:
    """Delete the table, the job's load history and quarantine and the tables of its routing file
    (``also``), then the database when nothing else is left in it. The tables' files stay in S3 (an Iceberg table
    dropped from the Glue catalog keeps its metadata and data files)."""
    steps: list[tuple[str, Any]] = [
        (f"table {database}.{name}", lambda name=name: glue.delete_table(DatabaseName=database, Name=name))
        for name in dict.fromkeys((table, LOAD_HISTORY, QUARANTINE, *also))
    ]
    steps.append((f"database {database}", lambda: _drop_if_empty(glue, database)))
    for what, call in steps:
        try:
            call()
            print(f"  dropped Glue {what}")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "EntityNotFoundException":
                raise DeployError(f"dropping Glue {what} failed: {exc}") from exc
            print(f"  Glue {what}: not there")


def _drop_if_empty(glue: Any, database: str) -> None:
    others = glue.get_tables(DatabaseName=database, MaxResults=1).get("TableList", [])
    if others:
        raise DeployError(f"Glue database {database} still holds other tables ({others[0]['Name']}...): kept")
    glue.delete_database(Name=database)
