"""Where the keys' states live: a key-value store the job's driver reads once per batch and writes
once per published share, whatever the history's length.

- ``dynamodb:<table>`` on AWS (the stack's ``KeyIndexTable``): one item per (table, bucket, key),
  read 100 keys a ``BatchGetItem`` and written 25 a ``BatchWriteItem``, on 8 threads: a batch of the
  seed's load (~1,700 objects) is 17 reads and 68 writes, ~0.1 s each way. A point read's cost does
  not grow with the items held (DynamoDB Developer Guide, "Partitions and data distribution": an
  item's partition is a hash of its key). At 200,000 new objects an hour for a year, 1.75 billion
  items of ~300 bytes: ~525 GB ($131 a month of storage, on-demand requests ~$220 a month).
- ``sqlite:///<path>`` locally (the embedded default, one process): the same items in one table.

Only the job's driver writes, one batch at a time, after the plan that read: no two writers race,
so writes are plain puts (a condition per item would cost a call per object).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from contracts.exceptions import StorageError
from glue_processor.keys.state import KeyState

Ident = tuple[str, str, str]  # (table, bucket, key)
READ_BATCH = 100  # BatchGetItem: at most 100 items (DynamoDB API Reference, BatchGetItem)
WRITE_BATCH = 25  # BatchWriteItem: at most 25 put or delete requests (API Reference, BatchWriteItem)
THREADS = 8
# Unprocessed keys and items come back in a 200 response: the client's retries do not cover them.
# Both API references ask for an exponential back-off before asking again (BatchGetItem,
# BatchWriteItem: "we strongly recommend that you use an exponential backoff algorithm").
ATTEMPTS = 12  # 0.05 s doubling to 10 s: ~40 s in all before the batch fails (and is retried)


def backoff(attempt: int) -> float:
    return float(min(10.0, 0.05 * 2 ** (attempt - 1)))


class KeyIndex(Protocol):
    def get(self, idents: Sequence[Ident]) -> dict[Ident, KeyState]: ...
    def put(self, states: Iterable[KeyState]) -> None: ...
    def delete(self, idents: Iterable[Ident]) -> None: ...


def open_index(uri: str, *, dynamodb: Any = None) -> KeyIndex:
    """The store of ``uri`` (see the module docstring); ``dynamodb``: a boto3 client to use."""
    if uri.startswith("sqlite:///"):
        return SqliteKeyIndex(Path(uri.removeprefix("sqlite:///")))
    if uri.startswith("dynamodb:"):
        if dynamodb is None:
            import boto3
            from botocore.config import Config

            dynamodb = boto3.client("dynamodb", config=Config(retries={"max_attempts": 10, "mode": "adaptive"}))
        return DynamoKeyIndex(dynamodb, uri.removeprefix("dynamodb:"))
    raise ValueError(f"unknown key index {uri!r}: expected dynamodb:<table> or sqlite:///<path>")


def _pk(ident: Ident) -> str:
    table, bucket, key = ident
    return f"{table}\n{bucket}\n{key}"  # no table or bucket name holds a line feed


class SqliteKeyIndex:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        with self._connect() as con:
            con.execute("CREATE TABLE IF NOT EXISTS keys (pk TEXT PRIMARY KEY, state TEXT NOT NULL)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60)

    def get(self, idents: Sequence[Ident]) -> dict[Ident, KeyState]:
        out: dict[Ident, KeyState] = {}
        wanted = {_pk(i): i for i in idents}
        keys = list(wanted)
        with self._lock, self._connect() as con:
            for start in range(0, len(keys), 500):  # SQLite's host parameters: at most 999 a statement
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = con.execute(f"SELECT pk, state FROM keys WHERE pk IN ({marks})", chunk)  # noqa: S608
                for pk, state in rows:
                    out[wanted[pk]] = KeyState.from_json(state)
        return out

    def put(self, states: Iterable[KeyState]) -> None:
        rows = [(_pk(s.ident), s.to_json()) for s in states]
        if not rows:
            return
        with self._lock, self._connect() as con:
            con.executemany("INSERT OR REPLACE INTO keys (pk, state) VALUES (?, ?)", rows)

    def delete(self, idents: Iterable[Ident]) -> None:
        rows = [(_pk(i),) for i in idents]
        if rows:
            with self._lock, self._connect() as con:
                con.executemany("DELETE FROM keys WHERE pk = ?", rows)


class DynamoKeyIndex:
    """Items ``{"pk": {"S": ...}, "state": {"S": <KeyState JSON>}}`` of ``table``."""

    def __init__(self, client: Any, table: str, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client, self.table, self.sleep = client, table, sleep

    def get(self, idents: Sequence[Ident]) -> dict[Ident, KeyState]:
        wanted = {_pk(i): i for i in idents}
        keys = list(wanted)
        chunks = [keys[i : i + READ_BATCH] for i in range(0, len(keys), READ_BATCH)]
        out: dict[Ident, KeyState] = {}
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            for items in pool.map(self._read, chunks):
                for item in items:
                    out[wanted[item["pk"]["S"]]] = KeyState.from_json(item["state"]["S"])
        return out

    def _read(self, pks: list[str]) -> list[dict[str, Any]]:
        request = {self.table: {"Keys": [{"pk": {"S": pk}} for pk in pks], "ConsistentRead": True}}
        responses = self._until_processed(self.client.batch_get_item, request, "UnprocessedKeys", "reading", "keys")
        return [item for response in responses for item in response.get("Responses", {}).get(self.table, [])]

    def _until_processed(
        self, call: Callable[..., dict[str, Any]], request: dict[str, Any], leftover: str, doing: str, what: str
    ) -> list[dict[str, Any]]:
        """``call``'s responses, what it left unprocessed (``leftover``: throttling) asked again after
        a back-off, at most :data:`ATTEMPTS` requests."""
        from botocore.exceptions import BotoCoreError, ClientError

        responses: list[dict[str, Any]] = []
        for attempt in range(ATTEMPTS):
            if attempt:
                self.sleep(backoff(attempt))
            try:
                response = call(RequestItems=request)
            except (ClientError, BotoCoreError) as exc:
                raise StorageError(f"{doing} the key index {self.table}: {exc}") from exc
            responses.append(response)
            request = response.get(leftover) or {}
            if not request:
                return responses
        raise StorageError(f"{doing} the key index {self.table}: {what} still unprocessed after {ATTEMPTS} requests")

    def put(self, states: Iterable[KeyState]) -> None:
        # one request per key, the last state given: BatchWriteItem refuses a key twice in a call
        latest = {_pk(s.ident): s for s in states}
        self._write(
            [{"PutRequest": {"Item": {"pk": {"S": pk}, "state": {"S": s.to_json()}}}} for pk, s in latest.items()]
        )

    def delete(self, idents: Iterable[Ident]) -> None:
        self._write([{"DeleteRequest": {"Key": {"pk": {"S": pk}}}} for pk in dict.fromkeys(_pk(i) for i in idents)])

    def _write(self, requests: list[dict[str, Any]]) -> None:
        chunks = [requests[i : i + WRITE_BATCH] for i in range(0, len(requests), WRITE_BATCH)]
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            list(pool.map(self._write_chunk, chunks))

    def _write_chunk(self, chunk: list[dict[str, Any]]) -> None:
        self._until_processed(self.client.batch_write_item, {self.table: chunk}, "UnprocessedItems", "writing", "items")
