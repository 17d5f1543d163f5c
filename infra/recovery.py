"""A first create that failed, recovered by ``make deploy REPLACE_FAILED=1``.

Such a stack can only be deleted. Its rollback ends in ROLLBACK_COMPLETE, or in ROLLBACK_FAILED
when a resource could not be deleted: by the time a late resource fails, the job may have written
the table's metadata, its checkpoints and access logs, and S3 refuses to delete a bucket that holds
objects (DeleteBucket, "BucketNotEmpty", S3 API Reference). So: quiet what runs, empty the buckets
left (asking first: it deletes data), delete the stack, then remove what a retain policy kept of
it (the stack delete that follows a failed create is not the create's rollback, so
RetainExceptOnCreate keeps; CloudFormation User Guide, "DeletionPolicy attribute"), and create again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from infra import kept, teardown
from infra import stack as cfn_stack
from infra.exceptions import DeployError

Ask = Callable[[str], bool]


def replace_failed_create(
    clients: Any,
    stack: str,
    status: str,
    *,
    replace_failed: bool,
    yes: bool,
    ask: Ask | None,
    region: str = "",
    wait_s: float = 900,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Say why the first create failed; with ``replace_failed`` (or a yes at the terminal) delete
    what it left, so the caller can create the stack again."""
    reasons = cfn_stack.failure_reasons(clients.cfn, stack)
    rolled = "was rolled back" if status == "ROLLBACK_COMPLETE" else "could not be rolled back"
    print(cfn_stack.with_reasons(f"stack {stack} is in {status}: its first create failed and {rolled}", reasons))
    command = f"make deploy STACK={stack}{f' REGION={region}' if region else ''} REPLACE_FAILED=1"
    if not (
        replace_failed or (ask is not None and ask(f"delete the failed stack {stack} and create it again? [y/N] "))
    ):
        raise DeployError(
            f"stack {stack} is in {status} and can only be deleted; fix the cause above, then run "
            f"{command} (deploy --replace-failed) to delete it and create it again"
        )
    resources = cfn_stack.physical_ids(clients.cfn, stack)
    full = teardown.holding_objects(clients.s3, teardown.buckets_of(resources))
    if full:
        print(f"the failed create left objects in {', '.join(f's3://{b}' for b in full)}")
        question = "delete every object in them (this deletes data), then the stack? [y/N] "
        if not yes and ask is None:
            raise DeployError(
                f"stack {stack} is in {status} and its buckets hold objects; run {command} YES=1 to empty them "
                "(this deletes their data), delete the stack and create it again"
            )
        if not (yes or (ask is not None and ask(question))):
            raise DeployError(f"not deleted: stack {stack} stays in {status}")
        teardown.quiet(
            teardown.Clients(events=clients.events, lambda_=clients.lambda_, glue=clients.glue, s3=clients.s3),
            resources,
            wait_s=wait_s,
            sleep=sleep,
        )
        teardown.empty_buckets(clients.s3, full)
    print(f"deleting the failed stack {stack}")
    try:
        cfn_stack.delete(clients.cfn, stack)
    except DeployError as exc:
        # S3 delivers access logs late, best effort (S3 User Guide, "Logging requests with server
        # access logging"): logs of the failed run's requests can land in a bucket after it was
        # emptied, and the delete then fails with BucketNotEmpty. Empty what is left, once more (as
        # make destroy does), so the one flag still recovers the stack.
        print(f"{exc}\nemptying the remaining buckets again and retrying the delete")
        teardown.empty_buckets(clients.s3, teardown.buckets_of(cfn_stack.physical_ids(clients.cfn, stack)))
        cfn_stack.delete(clients.cfn, stack)
    remove_retained(clients, resources)


def remove_retained(clients: Any, resources: list[dict[str, str]]) -> None:
    """What the stack delete kept of a failed create (its retain policies): the buckets (empty by
    now), the catalog (a database this stack created: a create over an existing one is refused),
    the key. Each is looked up first: a rollback that got that far removed it already."""
    alive = [r for r in resources if r.get("PhysicalResourceId") and r.get("ResourceStatus") != "DELETE_COMPLETE"]
    for r in alive:
        kind, physical = r["ResourceType"], r["PhysicalResourceId"]
        if kind == "AWS::S3::Bucket":
            kept.delete_bucket(clients.s3, physical)
        elif kind == "AWS::Glue::Database":
            _delete_database(clients.glue, physical)
        elif kind == "AWS::KMS::Key":
            kept.schedule_key_deletion(clients.kms, physical)


def _delete_database(glue: Any, database: str) -> None:
    # DeleteDatabase removes the tables in it too (Glue API Reference, DeleteDatabase): the job's
    # load history and any routed table it made before the create failed
    try:
        glue.delete_database(Name=database)
        print(f"  dropped Glue database {database} (the failed create's)")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "EntityNotFoundException":
            raise DeployError(f"dropping Glue database {database} failed: {exc}") from exc
