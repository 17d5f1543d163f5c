"""CloudFormation for ``make deploy`` / ``make destroy``: stack state, parameters, create/update/delete.

The CloudFormation client is passed in, so tests hand in a Stubber or moto client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from botocore.exceptions import ClientError, WaiterError

from infra.exceptions import DeployError

Outcome = Literal["created", "updated", "no changes"]
# Poll every 15 s for up to 2 hours: a first create with a KMS key and a Glue job takes minutes.
WAITER = {"Delay": 15, "MaxAttempts": 480}
FAILED_CREATE = "ROLLBACK_COMPLETE"
# States an update can start from; anything else in progress or broken is reported as it is.
UPDATABLE = {"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE"}


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
        raise DeployError(_failed(f"delete of stack {stack} failed: {exc}", failure_reasons(cfn, stack))) from exc


def handle_failed_create(cfn: Any, stack: str, *, replace_failed: bool, confirm: Callable[[str], bool] | None) -> None:
    """A stack in ROLLBACK_COMPLETE cannot be updated, only deleted: say why it failed, then
    delete it if allowed (``--replace-failed``, or a yes at the prompt)."""
    reasons = failure_reasons(cfn, stack)
    print(_failed(f"stack {stack} is in {FAILED_CREATE}: its first create failed and was rolled back", reasons))
    question = f"delete the failed stack {stack} and create it again? [y/N] "
    if not (replace_failed or (confirm is not None and confirm(question))):
        raise DeployError(
            f"stack {stack} is in {FAILED_CREATE} and can only be deleted; fix the cause above, then run "
            "make deploy REPLACE_FAILED=1 (deploy --replace-failed) to delete and recreate it"
        )
    print(f"deleting the failed stack {stack}")
    delete(cfn, stack)


def create_or_update(cfn: Any, args: dict[str, Any], *, exists: bool) -> Outcome:
    """Create or update and wait; a no-op update returns at once."""
    stack = args["StackName"]
    try:
        if exists:
            print(f"updating stack {stack}")
            try:
                cfn.update_stack(**args)
            except ClientError as exc:
                if "No updates are to be performed" in exc.response.get("Error", {}).get("Message", ""):
                    print("no changes")
                    return "no changes"
                raise
            cfn.get_waiter("stack_update_complete").wait(StackName=stack, WaiterConfig=WAITER)
            return "updated"
        print(f"creating stack {stack}")
        cfn.create_stack(**args, OnFailure="ROLLBACK")
        cfn.get_waiter("stack_create_complete").wait(StackName=stack, WaiterConfig=WAITER)
        return "created"
    except ClientError as exc:
        raise DeployError(f"CloudFormation refused the {'update' if exists else 'create'} of {stack}: {exc}") from exc
    except WaiterError as exc:
        raise DeployError(_failed(f"stack {stack} did not finish: {exc}", failure_reasons(cfn, stack))) from exc


def physical_ids(cfn: Any, stack: str) -> list[dict[str, str]]:
    """Every resource of the stack: LogicalResourceId, PhysicalResourceId, ResourceType."""
    out: list[dict[str, str]] = []
    try:
        for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack):
            out.extend(page["StackResourceSummaries"])
    except ClientError as exc:
        raise DeployError(f"list_stack_resources {stack} failed: {exc}") from exc
    return out


def _failed(headline: str, reasons: list[str]) -> str:
    if not reasons:
        return headline
    return headline + "\nfailed resources:\n" + "\n".join(f"  {r}" for r in reasons)
