"""CloudFormation for ``make deploy`` / ``make destroy``: stack state, parameters, create/update/delete.

The CloudFormation client is passed in, so tests hand in a Stubber or moto client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from botocore.exceptions import ClientError, WaiterError

from infra.exceptions import DeployError

Outcome = Literal["created", "updated", "no changes", "not applied"]
# Sees a computed change set (its changes, name, CREATE or UPDATE) and says whether to run it.
Review = Callable[[list[dict[str, Any]], str, str], bool]
# Poll every 15 s for up to 2 hours: a first create with a KMS key and a Glue job takes minutes.
WAITER = {"Delay": 15, "MaxAttempts": 480}
# A first create that failed: rolled back (ROLLBACK_COMPLETE), or not even that, because a resource
# could not be deleted (ROLLBACK_FAILED: a bucket holding objects). Either can only be deleted.
FAILED_CREATES = ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED")
# States an update can start from; anything else in progress or broken is reported as it is.
UPDATABLE = {"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE"}
# A stack that only ever had a CREATE change set that did not run: created again by the next one.
NEVER_CREATED = "REVIEW_IN_PROGRESS"


def describe(cfn: Any, stack: str) -> dict[str, Any] | None:
    """The stack, or ``None`` when it does not exist. Any other error is reported as itself."""
    try:
        return dict(cfn.describe_stacks(StackName=stack)["Stacks"][0])
    except ClientError as exc:
        err = exc.response.get("Error", {})
        if err.get("Code") == "ValidationError" and "does not exist" in err.get("Message", ""):
            return None
        raise DeployError(f"describe_stacks {stack} failed: {exc}") from exc


def failure_reasons(cfn: Any, stack: str, *, limit: int = 5) -> list[str]:
    """The first resource failures of the latest operation, oldest first: ``Logical (Type): reason``."""
    events: list[dict[str, Any]] = []
    try:
        for page in cfn.get_paginator("describe_stack_events").paginate(StackName=stack):
            events.extend(page["StackEvents"])
    except ClientError as exc:
        return [f"(stack events unavailable: {exc})"]
    failed = [
        e
        for e in reversed(events)  # the API lists newest first
        if e.get("ResourceStatus", "").endswith("_FAILED") and e.get("LogicalResourceId") != stack
    ]
    return [
        f"{e['LogicalResourceId']} ({e.get('ResourceType', '?')}): {e.get('ResourceStatusReason', 'no reason given')}"
        for e in failed[:limit]
    ]


def merge_parameters(
    *, declared: set[str], previous: Mapping[str, str], given: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Given values win; a parameter the stack already has and the template still declares keeps
    its previous value (``UsePreviousValue``); anything else takes the template default."""
    out: list[dict[str, Any]] = [{"ParameterKey": k, "ParameterValue": str(v)} for k, v in given.items()]
    out += [{"ParameterKey": k, "UsePreviousValue": True} for k in sorted(previous) if k in declared and k not in given]
    return out


def effective_values(
    *, defaults: Mapping[str, Any], previous: Mapping[str, str], given: Mapping[str, str]
) -> dict[str, str]:
    """What each parameter will be after the deploy: given, else previous, else the default."""
    out = {k: str(v) for k, v in defaults.items() if v is not None}
    out.update({k: v for k, v in previous.items() if k in defaults})
    out.update(given)
    return out


def previous_values(existing: Mapping[str, Any] | None) -> dict[str, str]:
    if not existing:
        return {}
    return {p["ParameterKey"]: p.get("ParameterValue", "") for p in existing.get("Parameters", [])}


def delete(cfn: Any, stack: str) -> None:
    """Delete and wait; on failure, say which resources failed and why."""
    try:
        cfn.delete_stack(StackName=stack)
        cfn.get_waiter("stack_delete_complete").wait(StackName=stack, WaiterConfig=WAITER)
    except (ClientError, WaiterError) as exc:
        raise DeployError(with_reasons(f"delete of stack {stack} failed: {exc}", failure_reasons(cfn, stack))) from exc


def create_or_update(
    cfn: Any,
    args: dict[str, Any],
    *,
    exists: bool,
    name: str | None = None,
    review: Review | None = None,
) -> Outcome:
    """Create or update through a change set, and wait. A change set with no change returns at once;
    one that would modify or remove a protected resource (:data:`PROTECTED`) is refused before it
    runs; ``review`` sees the changes and says whether to run them (a change set not run is
    deleted, and with it the empty stack a CREATE change set made).

    The stack policy that protects the catalog is set on an update before the change set runs, and
    on a create once the stack exists: a stack policy cannot be set on a stack that does not exist
    yet or is in an ``*_IN_PROGRESS`` state such as REVIEW_IN_PROGRESS (envato/stack_master#178,
    guardian/riff-raff#624)."""
    stack = args["StackName"]
    change_set = name or f"deploy-{int(time.time())}"
    kind = "UPDATE" if exists else "CREATE"
    try:
        print(f"{'updating' if exists else 'creating'} stack {stack} (change set {change_set})")
        cfn.create_change_set(**args, ChangeSetName=change_set, ChangeSetType=kind)
        changes = _reviewed(cfn, stack, change_set)
        if changes is None:
            print("no changes")
            if exists:  # a stack whose policy could not be set after its create gets it now
                set_policy(cfn, stack)
            return "no changes"
        refused = protected_changes(changes)
        if refused:
            discard(cfn, stack, change_set, created=not exists)
            raise DeployError(
                "the update would change resources that are never updated by CloudFormation (it would replace "
                "the table's metadata, which the job and the optimizers own): "
                + "; ".join(refused)
                + ". Change them by hand (see docs/operations.md), or keep their parameters as they are."
            )
        if review is not None and not _approved(cfn, review, changes, stack, change_set, created=not exists):
            return "not applied"
        if exists:
            set_policy(cfn, stack)
        cfn.execute_change_set(StackName=stack, ChangeSetName=change_set)
        waiter = "stack_update_complete" if exists else "stack_create_complete"
        cfn.get_waiter(waiter).wait(StackName=stack, WaiterConfig=WAITER)
    except ClientError as exc:
        raise DeployError(f"CloudFormation refused the {'update' if exists else 'create'} of {stack}: {exc}") from exc
    except WaiterError as exc:
        raise DeployError(with_reasons(f"stack {stack} did not finish: {exc}", failure_reasons(cfn, stack))) from exc
    if exists:
        return "updated"
    try:
        set_policy(cfn, stack)
    except ClientError as exc:
        raise DeployError(
            f"stack {stack} was created, but its stack policy was not set ({exc}); run make deploy again to set it"
        ) from exc
    return "created"


def _approved(
    cfn: Any, review: Review, changes: list[dict[str, Any]], stack: str, change_set: str, *, created: bool
) -> bool:
    try:
        go = review(changes, change_set, "CREATE" if created else "UPDATE")
    except DeployError:
        discard(cfn, stack, change_set, created=created)
        raise
    if not go:
        discard(cfn, stack, change_set, created=created)
    return go


def set_policy(cfn: Any, stack: str) -> None:
    cfn.set_stack_policy(StackName=stack, StackPolicyBody=json.dumps(STACK_POLICY))


def discard(cfn: Any, stack: str, change_set: str, *, created: bool) -> None:
    """Delete a change set that is not run; for a CREATE one, also the stack it left in
    REVIEW_IN_PROGRESS (it holds no resource), so a plan leaves nothing behind."""
    cfn.delete_change_set(StackName=stack, ChangeSetName=change_set)
    if created:
        cfn.delete_stack(StackName=stack)


# Resources CloudFormation must never update once created: an AWS::Glue::Table update sends the
# template's TableInput alone, dropping table_type=ICEBERG, metadata_location and every column the
# job added (aws-cloudformation/cloudformation-coverage-roadmap#1919, #2495); the database holds it.
PROTECTED = ("GlueDatabase", "IcebergTable", "HiveTable")
STACK_POLICY = {
    "Statement": [
        {"Effect": "Allow", "Action": "Update:*", "Principal": "*", "Resource": "*"},
        {
            "Effect": "Deny",
            "Action": "Update:*",
            "Principal": "*",
            "Resource": [f"LogicalResourceId/{name}" for name in PROTECTED],
        },
    ]
}


def protected_changes(changes: list[dict[str, Any]]) -> list[str]:
    """The changes of a change set that would modify or remove a protected resource."""
    out = []
    for change in changes:
        rc = change.get("ResourceChange", {})
        if rc.get("LogicalResourceId") in PROTECTED and rc.get("Action") in ("Modify", "Remove", "Dynamic"):
            out.append(f"{rc['LogicalResourceId']}: {rc['Action']} ({', '.join(rc.get('Scope', [])) or 'properties'})")
    return out


def _reviewed(cfn: Any, stack: str, change_set: str, *, poll_s: float = 3, attempts: int = 400) -> list[Any] | None:
    """The change set's changes once CloudFormation has computed them; None when it has none (the
    change set then says so by failing with an empty change list, and is deleted)."""
    for _ in range(attempts):
        desc = cfn.describe_change_set(StackName=stack, ChangeSetName=change_set)
        status = desc["Status"]
        if status == "CREATE_COMPLETE":
            changes = list(desc.get("Changes", []))
            while desc.get("NextToken"):
                desc = cfn.describe_change_set(StackName=stack, ChangeSetName=change_set, NextToken=desc["NextToken"])
                changes += desc.get("Changes", [])
            return changes
        if status == "FAILED":
            if not desc.get("Changes") and _no_changes(desc.get("StatusReason", "")):
                cfn.delete_change_set(StackName=stack, ChangeSetName=change_set)
                return None
            raise DeployError(f"change set {change_set} of {stack} failed: {desc.get('StatusReason', 'no reason')}")
        time.sleep(poll_s)
    raise DeployError(f"change set {change_set} of {stack} was not ready after {attempts * poll_s:.0f}s")


# The reasons CloudFormation gives a change set that failed for having nothing to do (what
# `aws cloudformation deploy` matches too): any other failure is the user's to read, never "no changes".
NO_CHANGES = ("didn't contain changes", "No updates are to be performed")


def _no_changes(reason: str) -> bool:
    return any(text in reason for text in NO_CHANGES)


def physical_ids(cfn: Any, stack: str) -> list[dict[str, str]]:
    """Every resource of the stack: LogicalResourceId, PhysicalResourceId, ResourceType."""
    out: list[dict[str, str]] = []
    try:
        for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack):
            out.extend(page["StackResourceSummaries"])
    except ClientError as exc:
        raise DeployError(f"list_stack_resources {stack} failed: {exc}") from exc
    return out


def with_reasons(headline: str, reasons: list[str]) -> str:
    if not reasons:
        return headline
    return headline + "\nfailed resources:\n" + "\n".join(f"  {r}" for r in reasons)
