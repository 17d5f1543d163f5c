"""A small CloudFormation for the lifecycle tests: stacks, change sets, rollbacks and deletes over
moto's S3, KMS, Glue and EventBridge, enforcing the documented rules ``make deploy`` and
``make destroy`` rely on. moto's own CloudFormation enforces none of them and creates few of the
template's resource types.

Rules encoded (each where it is enforced):
- a stack policy cannot be set on a stack that does not exist yet or is in an ``*_IN_PROGRESS``
  state such as REVIEW_IN_PROGRESS (envato/stack_master#178, guardian/riff-raff#624);
- S3 refuses to delete a bucket that holds objects (S3 API Reference, DeleteBucket: "BucketNotEmpty"),
  so a create's rollback that meets one ends in ROLLBACK_FAILED, and a resource another one still
  depends on is not deleted (CloudFormation User Guide, "Stack status codes"; deletes follow the
  dependency order);
- a stack in ROLLBACK_COMPLETE or ROLLBACK_FAILED can only be deleted: a change set for it is
  refused ("is in ... state and can not be updated", CloudFormation User Guide, "Stack status codes");
- DeletionPolicy: Retain keeps the resource; RetainExceptOnCreate keeps it on every operation but
  the rollback of the create that made it (CloudFormation User Guide, "DeletionPolicy attribute");
- a create of a named bucket, database or table that exists already fails ("already exists");
- an update of an ``AWS::Glue::Table`` sends the template's TableInput alone
  (aws-cloudformation/cloudformation-coverage-roadmap#1919);
- a stack policy denies the updates it names (CloudFormation User Guide, "Prevent updates to stack
  resources").
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from botocore.exceptions import ClientError, WaiterError

from infra.plan import conditions

ACCOUNT = "123456789012"
MODELED = {
    "AWS::S3::Bucket",
    "AWS::KMS::Key",
    "AWS::Glue::Database",
    "AWS::Glue::Table",
    "AWS::Events::Rule",
    "AWS::DynamoDB::Table",
}


def error(code: str, message: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


@dataclass
class Resource:
    logical: str
    kind: str
    physical: str = ""
    status: str = "CREATE_IN_PROGRESS"
    arn: str = ""


@dataclass
class Stack:
    name: str
    status: str
    template: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)
    resources: dict[str, Resource] = field(default_factory=dict)
    change_sets: dict[str, dict[str, Any]] = field(default_factory=dict)
    policy: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)


class FakeCloudFormation:
    """The subset of the CloudFormation client ``infra`` calls, with a stack lifecycle behind it."""

    def __init__(self, *, s3: Any, kms: Any, glue: Any, events: Any, region: str, dynamodb: Any = None) -> None:
        self.s3, self.kms, self.glue, self.events_client, self.region = s3, kms, glue, events, region
        self.dynamodb = dynamodb
        self.stacks: dict[str, Stack] = {}
        self.calls: list[str] = []
        self.fail_at: str | None = None  # the logical id whose create fails
        self.before_failure: Any = None  # called with the stack just before that failure
        self.before_delete: Any = None  # called with the stack as a DeleteStack starts (late writes)

    # -- the API --------------------------------------------------------------------------------
    def describe_stacks(self, *, StackName: str) -> dict[str, Any]:
        stack = self._stack(StackName, "DescribeStacks")
        params = [{"ParameterKey": k, "ParameterValue": v} for k, v in stack.parameters.items()]
        return {
            "Stacks": [
                {
                    "StackName": stack.name,
                    "StackStatus": stack.status,
                    "CreationTime": datetime.now(UTC),
                    "Parameters": params,
                    "Outputs": [],
                }
            ]
        }

    def create_change_set(self, **kw: Any) -> dict[str, Any]:
        self.calls.append("CreateChangeSet")
        name, kind = kw["StackName"], kw["ChangeSetType"]
        stack = self.stacks.get(name)
        if kind == "CREATE":
            if stack is not None and stack.status != "REVIEW_IN_PROGRESS":
                raise error("AlreadyExistsException", f"Stack [{name}] already exists", "CreateChangeSet")
            stack = self.stacks.setdefault(name, Stack(name, "REVIEW_IN_PROGRESS"))
        else:
            if stack is None or stack.status == "REVIEW_IN_PROGRESS":
                raise error("ValidationError", f"Stack [{name}] does not exist", "CreateChangeSet")
            if stack.status in ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED"):
                raise error(
                    "ValidationError",
                    f"Stack:{name} is in {stack.status} state and can not be updated.",
                    "CreateChangeSet",
                )
        template = self._template(kw["TemplateURL"])
        values = self._values(template, kw.get("Parameters", []), stack.parameters)
        changes = self._changes(stack, template, values, kind)
        stack.change_sets[kw["ChangeSetName"]] = {
            "kind": kind,
            "template": template,
            "values": values,
            "changes": changes,
        }
        return {"Id": kw["ChangeSetName"], "StackId": name}

    def describe_change_set(self, *, StackName: str, ChangeSetName: str, **_: Any) -> dict[str, Any]:
        cs = self.stacks[StackName].change_sets[ChangeSetName]
        if not cs["changes"]:
            reason = "The submitted information didn't contain changes."
            return {"Status": "FAILED", "ExecutionStatus": "UNAVAILABLE", "StatusReason": reason, "Changes": []}
        return {"Status": "CREATE_COMPLETE", "ExecutionStatus": "AVAILABLE", "Changes": cs["changes"]}

    def delete_change_set(self, *, StackName: str, ChangeSetName: str) -> dict[str, Any]:
        self.calls.append("DeleteChangeSet")
        self.stacks[StackName].change_sets.pop(ChangeSetName)
        return {}

    def set_stack_policy(self, *, StackName: str, StackPolicyBody: str) -> dict[str, Any]:
        self.calls.append("SetStackPolicy")
        stack = self.stacks.get(StackName)
        # envato/stack_master#178, guardian/riff-raff#624: no policy on a stack not created yet or in progress
        if stack is None or stack.status.endswith("_IN_PROGRESS"):
            status = stack.status if stack else "not created"
            raise error(
                "ValidationError", f"Stack {StackName} is {status}: no stack policy can be set", "SetStackPolicy"
            )
        stack.policy = json.loads(StackPolicyBody)
        return {}

    def execute_change_set(self, *, StackName: str, ChangeSetName: str) -> dict[str, Any]:
        self.calls.append("ExecuteChangeSet")
        stack = self.stacks[StackName]
        cs = stack.change_sets.pop(ChangeSetName)
        stack.change_sets.clear()  # executing one change set deletes the stack's others
        if cs["kind"] == "CREATE":
            self._create(stack, cs)
        else:
            self._update(stack, cs)
        return {}

    def delete_stack(self, *, StackName: str) -> dict[str, Any]:
        self.calls.append("DeleteStack")
        stack = self.stacks.get(StackName)
        if stack is None:
            return {}  # DeleteStack of a stack that does not exist succeeds
        if stack.status == "REVIEW_IN_PROGRESS":  # a CREATE change set's stack holds no resource
            del self.stacks[StackName]
            return {}
        stack.status = "DELETE_IN_PROGRESS"
        if self.before_delete is not None:
            self.before_delete(stack)
        failed = self._delete_all(stack, rollback=False)
        if failed:
            stack.status = "DELETE_FAILED"
        else:
            del self.stacks[StackName]
        return {}

    def describe_stack_resource(self, *, StackName: str, LogicalResourceId: str) -> dict[str, Any]:
        r = self._stack(StackName, "DescribeStackResource").resources[LogicalResourceId]
        return {"StackResourceDetail": {"LogicalResourceId": r.logical, "PhysicalResourceId": r.physical}}

    def get_waiter(self, name: str) -> Any:
        return _Waiter(self, name)

    def get_paginator(self, name: str) -> Any:
        return _Paginator(self, name)

    # -- lifecycle ------------------------------------------------------------------------------
    def _create(self, stack: Stack, cs: dict[str, Any]) -> None:
        stack.template, stack.parameters, stack.status = cs["template"], cs["values"], "CREATE_IN_PROGRESS"
        for logical in self._order(stack.template, cs["values"]):
            kind = stack.template["Resources"][logical]["Type"]
            res = stack.resources[logical] = Resource(logical, kind)
            if logical == self.fail_at:
                if self.before_failure is not None:
                    self.before_failure(stack)
                self._event(stack, res, "CREATE_FAILED", "Resource handler returned message: injected failure")
                break
            try:
                self._provision(stack, res)
            except ClientError as exc:
                self._event(stack, res, "CREATE_FAILED", str(exc))
                break
            res.status = "CREATE_COMPLETE"
        else:
            stack.status = "CREATE_COMPLETE"
            return
        stack.status = "ROLLBACK_IN_PROGRESS"
        failed = self._delete_all(stack, rollback=True)
        stack.status = "ROLLBACK_FAILED" if failed else "ROLLBACK_COMPLETE"

    def _update(self, stack: Stack, cs: dict[str, Any]) -> None:
        denied = self._denied(stack)
        stack.status = "UPDATE_IN_PROGRESS"
        for change in cs["changes"]:
            rc = change["ResourceChange"]
            if rc["LogicalResourceId"] in denied and rc["Action"] in ("Modify", "Remove"):
                res = stack.resources[rc["LogicalResourceId"]]
                self._event(stack, res, "UPDATE_FAILED", "Action denied by stack policy")
                stack.status = "UPDATE_ROLLBACK_COMPLETE"
                return
        old_template = stack.template
        stack.template, stack.parameters = cs["template"], cs["values"]
        for change in cs["changes"]:
            rc = change["ResourceChange"]
            logical, action = rc["LogicalResourceId"], rc["Action"]
            if action == "Add":
                res = stack.resources[logical] = Resource(logical, rc["ResourceType"])
                self._provision(stack, res)
                res.status = "CREATE_COMPLETE"
            elif action == "Remove":
                self._delete(stack, stack.resources[logical], old_template, rollback=False)
            elif action == "Modify":
                self._modify(stack, stack.resources[logical])
        stack.status = "UPDATE_COMPLETE"

    def _delete_all(self, stack: Stack, *, rollback: bool) -> bool:
        """Delete in reverse dependency order; a resource something still depends on stays."""
        failed = False
        for logical in reversed(self._order(stack.template, stack.parameters)):
            res = stack.resources.get(logical)
            if res is None or res.status in ("DELETE_COMPLETE", "DELETE_SKIPPED") or not res.physical:
                if res is not None and not res.physical:
                    res.status = "DELETE_COMPLETE"
                continue
            blockers = [
                other
                for other in stack.resources.values()
                if other.status not in ("DELETE_COMPLETE", "DELETE_SKIPPED")
                and logical in self._depends(stack.template, other.logical)
            ]
            if blockers:
                continue
            failed |= not self._delete(stack, res, stack.template, rollback=rollback)
        return failed

    def _delete(self, stack: Stack, res: Resource, template: dict[str, Any], *, rollback: bool) -> bool:
        policy = template["Resources"][res.logical].get("DeletionPolicy", "Delete")
        if policy == "Retain" or (policy == "RetainExceptOnCreate" and not rollback):
            res.status = "DELETE_SKIPPED"
            return True
        try:
            self._destroy(res)
        except ClientError as exc:
            reason = exc.response["Error"]["Message"]
            self._event(stack, res, "DELETE_FAILED", reason)
            return False
        res.status = "DELETE_COMPLETE"
        return True

    # -- resources ------------------------------------------------------------------------------
    def _provision(self, stack: Stack, res: Resource) -> None:
        props = self._resolve(stack, stack.template["Resources"][res.logical].get("Properties", {}))
        if res.kind == "AWS::S3::Bucket":
            name = props["BucketName"]
            try:
                self.s3.head_bucket(Bucket=name)
            except ClientError:
                pass
            else:
                raise error("AlreadyExists", f"{name} already exists", "CreateBucket")
            self.s3.create_bucket(Bucket=name)
            self.s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
            default = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
            if default.get("KMSMasterKeyID"):
                rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", **default}}
                self.s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": [rule]})
            res.physical = name
        elif res.kind == "AWS::KMS::Key":
            meta = self.kms.create_key(Description=props.get("Description", ""))["KeyMetadata"]
            res.physical, res.arn = meta["KeyId"], meta["Arn"]
        elif res.kind == "AWS::Glue::Database":
            name = props["DatabaseInput"]["Name"]
            self.glue.create_database(DatabaseInput={"Name": name})
            res.physical = name
        elif res.kind == "AWS::Glue::Table":
            self.glue.create_table(DatabaseName=props["DatabaseName"], TableInput=self._table_input(props))
            res.physical, res.arn = props["TableInput"]["Name"], props["DatabaseName"]  # arn: its database
        elif res.kind == "AWS::Events::Rule":
            res.physical = f"{stack.name}-{res.logical}"[:64]
            self.events_client.put_rule(Name=res.physical, ScheduleExpression="rate(2 minutes)")
        elif res.kind == "AWS::DynamoDB::Table" and self.dynamodb is not None:
            # a table of that name already there (kept by an earlier stack): ResourceInUseException, as DynamoDB
            self.dynamodb.create_table(
                TableName=props["TableName"],
                AttributeDefinitions=props["AttributeDefinitions"],
                KeySchema=props["KeySchema"],
                BillingMode=props["BillingMode"],
            )
            res.physical = props["TableName"]
        else:  # not modeled: it exists only here
            res.physical = str(uuid.uuid4()) if res.kind == "AWS::Lambda::EventSourceMapping" else res.logical
        self._event(stack, res, "CREATE_COMPLETE", "")

    def _modify(self, stack: Stack, res: Resource) -> None:
        if res.kind == "AWS::Glue::Table":  # the template's TableInput alone (coverage-roadmap#1919)
            props = self._resolve(stack, stack.template["Resources"][res.logical]["Properties"])
            self.glue.update_table(DatabaseName=props["DatabaseName"], TableInput=self._table_input(props))

    def _destroy(self, res: Resource) -> None:
        if res.kind == "AWS::S3::Bucket":
            self.s3.delete_bucket(Bucket=res.physical)  # moto: BucketNotEmpty, as S3
        elif res.kind == "AWS::KMS::Key":
            self.kms.schedule_key_deletion(KeyId=res.physical, PendingWindowInDays=30)
        elif res.kind == "AWS::Glue::Database":
            self.glue.delete_database(Name=res.physical)
        elif res.kind == "AWS::Glue::Table":
            self.glue.delete_table(DatabaseName=res.arn, Name=res.physical)
        elif res.kind == "AWS::Events::Rule":
            self.events_client.delete_rule(Name=res.physical)
        elif res.kind == "AWS::DynamoDB::Table" and self.dynamodb is not None:
            self.dynamodb.delete_table(TableName=res.physical)

    @staticmethod
    def _table_input(props: dict[str, Any]) -> dict[str, Any]:
        given = props["TableInput"]
        out = {"Name": given["Name"], "TableType": given.get("TableType", "EXTERNAL_TABLE")}
        out["StorageDescriptor"] = {"Location": given["StorageDescriptor"]["Location"]}
        out["Parameters"] = given.get("Parameters", {})
        return out

    # -- templates ------------------------------------------------------------------------------
    def _template(self, url: str) -> dict[str, Any]:
        parsed = urlparse(url)
        bucket = parsed.netloc.split(".s3.", 1)[0]
        body = self.s3.get_object(Bucket=bucket, Key=parsed.path.lstrip("/"))["Body"].read()
        return dict(json.loads(body))

    @staticmethod
    def _values(template: dict[str, Any], given: list[dict[str, Any]], previous: dict[str, str]) -> dict[str, str]:
        out = {k: str(v["Default"]) for k, v in template["Parameters"].items() if "Default" in v}
        for p in given:
            out[p["ParameterKey"]] = previous[p["ParameterKey"]] if p.get("UsePreviousValue") else p["ParameterValue"]
        return out

    def _changes(
        self, stack: Stack, template: dict[str, Any], values: dict[str, str], kind: str
    ) -> list[dict[str, Any]]:
        new = self._created(template, values)
        if kind == "CREATE":
            return [self._change("Add", logical, template) for logical in new]
        old = stack.resources
        probe = Stack(stack.name, stack.status, template, values, stack.resources)
        out = [self._change("Add", logical, template) for logical in new if logical not in old]
        out += [self._change("Remove", logical, stack.template) for logical in old if logical not in new]
        for logical in new:
            if logical in old:
                before = self._resolve(stack, stack.template["Resources"][logical].get("Properties", {}))
                after = self._resolve(probe, template["Resources"][logical].get("Properties", {}))
                if before != after:
                    out.append(self._change("Modify", logical, template, replacement="False"))
        return out

    @staticmethod
    def _change(action: str, logical: str, template: dict[str, Any], *, replacement: str = "") -> dict[str, Any]:
        rc = {"Action": action, "LogicalResourceId": logical, "ResourceType": template["Resources"][logical]["Type"]}
        return {"Type": "Resource", "ResourceChange": {**rc, **({"Replacement": replacement} if replacement else {})}}

    @staticmethod
    def _created(template: dict[str, Any], values: dict[str, str]) -> list[str]:
        holds = conditions(template, values)
        return [k for k, r in template["Resources"].items() if holds.get(r.get("Condition", ""), True)]

    def _order(self, template: dict[str, Any], values: dict[str, str]) -> list[str]:
        """The resources in dependency order (template order among independent ones)."""
        todo, done = self._created(template, values), []
        while todo:
            ready = next(x for x in todo if not (self._depends(template, x) & set(todo)) - {x})
            done.append(ready)
            todo.remove(ready)
        return done

    @staticmethod
    def _depends(template: dict[str, Any], logical: str) -> set[str]:
        res = template["Resources"].get(logical, {})
        text = json.dumps(res)
        names = set(template["Resources"])
        refs = set(re.findall(r'"Ref": "([A-Za-z0-9]+)"', text))
        refs |= set(re.findall(r'"Fn::GetAtt": \["([A-Za-z0-9]+)"', text))
        refs |= set(re.findall(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z]+)?\}", text))
        depends = res.get("DependsOn", [])
        refs |= set([depends] if isinstance(depends, str) else depends)
        return refs & names

    def _resolve(self, stack: Stack, node: Any) -> Any:
        values = stack.parameters
        pseudo = {"AWS::AccountId": ACCOUNT, "AWS::Region": self.region, "AWS::Partition": "aws", "AWS::NoValue": None}

        def ref(name: str, attr: str | None = None) -> str:
            if name in pseudo:
                return str(pseudo[name])
            if name in values:
                return values[name]
            res = stack.resources.get(name)
            if res is None:
                return f"<{name}>"
            if attr == "Arn":
                return res.arn or f"arn:aws:::{res.physical}"
            return res.physical

        if isinstance(node, dict):
            if "Ref" in node:
                return ref(node["Ref"])
            if "Fn::GetAtt" in node:
                return ref(node["Fn::GetAtt"][0], node["Fn::GetAtt"][1])
            if "Fn::Sub" in node:
                text = node["Fn::Sub"] if isinstance(node["Fn::Sub"], str) else node["Fn::Sub"][0]
                return re.sub(
                    r"\$\{([A-Za-z0-9:]+)(?:\.([A-Za-z]+))?\}", lambda m: ref(m.group(1), m.group(2)), text
                ).replace("${!", "${")
            if "Fn::If" in node:
                name, yes, no = node["Fn::If"]
                return self._resolve(stack, yes if conditions(stack.template, values).get(name) else no)
            return {k: self._resolve(stack, v) for k, v in node.items()}
        if isinstance(node, list):
            return [self._resolve(stack, v) for v in node]
        return node

    # -- bookkeeping ----------------------------------------------------------------------------
    def _denied(self, stack: Stack) -> set[str]:
        denied: set[str] = set()
        for st in (stack.policy or {}).get("Statement", []):
            if st["Effect"] == "Deny" and st["Action"] in ("Update:*", "Update:Modify"):
                resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
                denied |= {r.split("/", 1)[1] for r in resources if r.startswith("LogicalResourceId/")}
        return denied

    def _event(self, stack: Stack, res: Resource, status: str, reason: str) -> None:
        res.status = status
        stack.events.insert(
            0,
            {
                "StackId": stack.name,
                "EventId": str(uuid.uuid4()),
                "StackName": stack.name,
                "LogicalResourceId": res.logical,
                "ResourceType": res.kind,
                "ResourceStatus": status,
                "ResourceStatusReason": reason,
                "Timestamp": datetime.now(UTC),
            },
        )

    def _stack(self, name: str, operation: str) -> Stack:
        self.calls.append(operation)
        stack = self.stacks.get(name)
        if stack is None:
            raise error("ValidationError", f"Stack with id {name} does not exist", operation)
        return stack


class _Waiter:
    def __init__(self, cfn: FakeCloudFormation, name: str) -> None:
        self.cfn, self.name = cfn, name

    def wait(self, *, StackName: str, WaiterConfig: Any = None) -> None:
        stack = self.cfn.stacks.get(StackName)
        want = {"stack_create_complete": "CREATE_COMPLETE", "stack_update_complete": "UPDATE_COMPLETE"}
        if self.name == "stack_delete_complete" and stack is None:
            return
        if stack is not None and want.get(self.name) == stack.status:
            return
        status = stack.status if stack else "gone"
        raise WaiterError(self.name, f"Waiter encountered a terminal failure state: {status}", {})


class _Paginator:
    def __init__(self, cfn: FakeCloudFormation, name: str) -> None:
        self.cfn, self.name = cfn, name

    def paginate(self, *, StackName: str) -> list[dict[str, Any]]:
        if self.name == "describe_stack_events":
            return [{"StackEvents": self.cfn._stack(StackName, "DescribeStackEvents").events}]
        stack = self.cfn._stack(StackName, "ListStackResources")
        return [
            {
                "StackResourceSummaries": [
                    {
                        "LogicalResourceId": r.logical,
                        "PhysicalResourceId": r.physical,
                        "ResourceType": r.kind,
                        "ResourceStatus": r.status,
                        "LastUpdatedTimestamp": datetime.now(UTC),
                    }
                    for r in stack.resources.values()
                ]
            }
        ]
