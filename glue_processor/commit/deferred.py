"""Table shares set aside: committed, not yet published, tried again every batch.

A share whose publication keeps failing for a reason that passes (its table's catalog entry is
locked, denied, throttled, gone for a while) would hold every table and every later batch behind it.
After ``--publish_hold_seconds`` of back-off it is set aside instead: listed in
``<output>/_deferred/shares.json`` (a few hundred bytes an entry, written on each change), and the
batch, the other tables and the next batches go on. At the start of each batch the shares that are
due are tried once each, with exponential back-off and full jitter between tries (at most
:data:`MAX_WAIT_S`); one that publishes leaves the list and its rows join the load history. Nothing
is lost: its files are in place under the table's ``ingest/`` directory (beyond orphan-file
deletion), its commit record lists them, and a restart reads the list back.

The list is bounded (``--max_deferred_publications``): past it, a batch waits for its publication
as long as it takes, as with no hold. ``DeferredPublications`` (the list's length, every batch)
alarms while the list is not empty.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime

from glue_processor.hadoop_fs import HadoopFS

logger = logging.getLogger(__name__)

DEFERRED = "_deferred/shares.json"
MAX_WAIT_S = 300.0


@dataclass(frozen=True)
class SetAside:
    query_id: str
    batch_id: int
    table: str
    since: str  # ISO time it was set aside
    tries: int = 0  # failed tries since
    next_at: float = 0.0  # epoch seconds of the next try

    @property
    def ident(self) -> tuple[str, int, str]:
        return (self.query_id, self.batch_id, self.table)


class Deferred:
    """The shares set aside, persisted beside the ledger."""

    def __init__(self, fs: HadoopFS, output_uri: str, *, limit: int) -> None:
        self.fs, self.uri, self.limit = fs, f"{output_uri}/{DEFERRED}", limit
        self._items: dict[tuple[str, int, str], SetAside] = {}
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self.fs.exists(self.uri):
            for raw in json.loads(self.fs.read_bytes(self.uri)):
                item = SetAside(**raw)
                self._items[item.ident] = item

    def __len__(self) -> int:
        self._load()
        return len(self._items)

    @property
    def room(self) -> bool:
        """May another share be set aside?"""
        return len(self) < self.limit

    def add(self, query_id: str, batch_id: int, table: str, now: datetime | None = None) -> None:
        self._load()
        when = now or datetime.now(UTC)
        item = SetAside(query_id, batch_id, table, when.isoformat(), 0, when.timestamp() + _wait(0))
        if item.ident not in self._items:
            self._items[item.ident] = item
            self._save()
            logger.error("table share set aside: its publication keeps failing", extra=asdict(item))

    def remove(self, item: SetAside) -> None:
        self._load()
        if self._items.pop(item.ident, None) is not None:
            self._save()

    def due(self, now: datetime | None = None) -> list[SetAside]:
        """The shares to try now, oldest batch first."""
        self._load()
        t = (now or datetime.now(UTC)).timestamp()
        return sorted((i for i in self._items.values() if i.next_at <= t), key=lambda i: (i.batch_id, i.table))

    def failed(self, item: SetAside, now: datetime | None = None) -> None:
        """One more failed try: the next after a longer wait."""
        self._load()
        t = (now or datetime.now(UTC)).timestamp()
        tries = item.tries + 1
        self._items[item.ident] = replace(item, tries=tries, next_at=t + _wait(tries))
        self._save()

    def _save(self) -> None:
        body = json.dumps([asdict(i) for i in sorted(self._items.values(), key=lambda i: i.ident)], indent=1)
        self.fs.write_bytes(self.uri, body.encode())


def _wait(tries: int) -> float:
    """Full jitter below a cap that doubles from 1 s (AWS's exponential back-off and jitter)."""
    return random.uniform(0, min(MAX_WAIT_S, 2.0**tries))  # noqa: S311 - spreading retries, not security
