"""The key index on both its stores: SQLite locally, DynamoDB (moto) as the stack deploys it.

DynamoDB's limits are the ones a batch meets: at most 100 keys a BatchGetItem and 25 requests a
BatchWriteItem, and never one key twice in a call (DynamoDB API Reference, BatchGetItem and
BatchWriteItem: "ValidationException ... duplicates")."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from glue_processor.keys.state import KeyState, Segment, later
from glue_processor.keys.store import KeyIndex, open_index

T0 = datetime(2026, 11, 27, tzinfo=UTC)


def _state(n: int, etag: str = "e1") -> KeyState:
    return KeyState(
        table="events",
        bucket="landing",
        key=f"incoming/ünï {n:05d}.json",
        etag=etag,
        sequencer=f"{n:016X}",
        event_time=T0,
        segments=(Segment(query_id="q", batch_id=n, partitions=('{"spec": 0, "values": [20000]}',)),),
        lines=n,
    )


@pytest.fixture(params=["sqlite", "dynamodb"])
def index(request: pytest.FixtureRequest, tmp_path: Path, aws: None) -> KeyIndex:
    if request.param == "sqlite":
        return open_index(f"sqlite:///{tmp_path}/keys.db")
    client: Any = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(  # as the stack's KeyIndexTable
        TableName="ingest-key-index",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return open_index("dynamodb:ingest-key-index", dynamodb=client)


def test_a_batch_of_keys_is_read_and_written_past_the_per_call_limits(index: KeyIndex) -> None:
    # Given 250 keys written (10 BatchWriteItem calls of 25), one of them given twice
    states = [_state(n) for n in range(250)]
    index.put([*states, _state(7, etag="e2")])
    # When they are read back with keys never written, and one asked twice (3 BatchGetItem calls)
    idents = [s.ident for s in states] + [("events", "landing", "never"), states[0].ident]
    found = index.get(idents)
    # Then each written key's last state comes back whole, the others are absent
    assert len(found) == 250 and ("events", "landing", "never") not in found
    assert found[_state(7).ident].etag == "e2" and found[_state(42).ident] == _state(42)


def test_a_tombstone_and_a_delete(index: KeyIndex) -> None:
    index.put([_state(1)])
    tomb = _state(1).model_copy(update={"segments": (), "retracted": True, "sequencer": "FF"})
    index.put([tomb])
    assert index.get([tomb.ident])[tomb.ident].retracted
    index.delete([tomb.ident, tomb.ident])
    assert index.get([tomb.ident]) == {}


def test_versions_are_ordered_by_sequencer_as_s3_says_then_by_time() -> None:
    # S3 User Guide, "Event message structure": compare sequencers as hexadecimal values, the
    # shorter left-padded with zeros; an entry without one (a local file, a backfill) by its time
    assert later("0A5", T0, "0C", T0) and not later("0C", T0, "0A5", T0)
    assert later(None, T0.replace(hour=1), "0C", T0)


def test_unprocessed_items_are_asked_again_after_an_exponential_back_off() -> None:
    # Unprocessed items come back in a 200 response (no client retry covers them); the API reference
    # asks for an exponential back-off before asking again (DynamoDB API Reference, BatchWriteItem)
    from glue_processor.keys.store import DynamoKeyIndex

    class Throttled:
        def __init__(self) -> None:
            self.calls = 0

        def batch_write_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
            self.calls += 1
            return {"UnprocessedItems": RequestItems} if self.calls < 3 else {}

    slept: list[float] = []
    client = Throttled()
    DynamoKeyIndex(client, "t", sleep=slept.append).put([_state(1)])
    assert client.calls == 3 and slept == [0.05, 0.1]
