"""Test helpers: turning SQS messages into Lambda events, reading Parquet back."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from glue_processor.table.read import published_files
from tests.conftest import load_event


@dataclass
class FakeLambdaContext:
    function_name: str = "manifest-builder"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:manifest-builder"
    aws_request_id: str = "req-1"


def lambda_sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """What the SQS event source mapping hands the Lambda for messages received from SQS."""
    template = load_event("sqs_message.json")
    records = []
    for msg in messages:
        record = copy.deepcopy(template)
        record.update(
            messageId=msg["MessageId"],
            receiptHandle=msg["ReceiptHandle"],
            body=msg["Body"],
            md5OfBody=msg["MD5OfBody"],
            eventSourceARN=queue_arn,
        )
        records.append(record)
    return {"Records": records}


def sqs_record(body: Any, message_id: str) -> dict[str, Any]:
    record = load_event("sqs_message.json")
    record["messageId"] = message_id
    record["body"] = body if isinstance(body, str) else json.dumps(body)
    return record


def declared(root: Path, **columns: str) -> str:
    """A declared-schema file under ``root`` (a partition column must be declared: ``--partition_by``),
    as the URI ``--schema`` takes."""
    path = root / "declared.json"
    path.write_text(json.dumps({"columns": columns}))
    return path.as_uri()


def visible_parquet(root: Path) -> list[Path]:
    """The data files a reader sees: the Iceberg table's current snapshot, or visible hive files."""
    return published_files(root)


def read_rows(root: Path) -> list[dict[str, Any]]:
    """Every row of every published Parquet file, as a reader like Athena would see them."""
    rows: list[dict[str, Any]] = []
    for path in visible_parquet(root):
        rows.extend(pq.ParquetFile(path).read().to_pylist())
    return rows


def merge_plans(monkeypatch: Any) -> list[Any]:
    """The write stage's merge plans (``MergePlan``), one per table share, as the job makes them."""
    from glue_processor.write import stage

    plans: list[Any] = []
    real = stage.plan_merge

    def recorded(*args: Any, **kwargs: Any) -> Any:
        plans.append(real(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(stage, "plan_merge", recorded)
    return plans


def policy_statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    """A policy document's statements, a conditional one (``Fn::If`` [condition, statement,
    AWS::NoValue]) as it is when its condition holds: every statement the role may ever have."""
    out = []
    for st in document["Statement"]:
        if "Fn::If" in st:
            _, then, _otherwise = st["Fn::If"]
            out.append(then)
        else:
            out.append(st)
    return out
