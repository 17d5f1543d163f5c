"""Table shares set aside: committed, not yet published, tried again every batch.

A share whose publication keeps failing for a reason that passes (its table's catalog entry is
locked, denied, throttled, gone for a while) would hold every table and every later batch behind it.
After ``--publish_hold_seconds`` of back-off it is set aside instead: listed in
``<output>/_deferred/shares.json`` (a few hundred bytes an entry, written on each change), and the
batch, the other tables and the next batches go on. At the start of each batch the shares that are
due are tried once each, with exponential back-off and full jitter between tries (at most
:data:`MAX_WAIT_S`); one that publishes leaves the list and its rows join the load history. Nothing
is lost: its files are in place under the table's ``ingest/`` directory, its commit record lists
them, and a restart reads the list back. Orphan-file deletion covers ``ingest/`` too: a share set
aside longer than ``OrphanFileRetentionDays`` may lose files, and is then refused at its
publication (its objects quarantined, ``make reconcile REQUEUE=1`` loads them again) rather than
appended naming a missing file (``IcebergSink.publish``).

The list is bounded (``--max_deferred_publications``): past it, a batch waits for its publication
as long as it takes, as with no hold. ``DeferredPublications`` (the list's length, every batch)
alarms while the list is not empty. The list is a cache of the durable truth, the markers beside the
commit records (``<batch>.<table>.deferred``, and ``.published`` or ``.abandoned`` once settled): a
list that cannot be read is rebuilt from them.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime

from contracts.layout import COMMITS_DIR
from contracts.retry import backoff_s
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
        self.fs, self.output_uri, self.limit = fs, output_uri, limit
        self.uri = f"{output_uri}/{DEFERRED}"
        self._items: dict[tuple[str, int, str], SetAside] = {}
        self._loaded = False
        self._lock = threading.RLock()  # one writer of the list at a time

    def _load(self) -> None:
        """Read the list once; a read that fails (S3 throttles, a timeout) raises and leaves it
        unread, so nothing overwrites the list with less than it holds."""
        with self._lock:
            if self._loaded:
                return
            items: dict[tuple[str, int, str], SetAside] = {}
            if self.fs.exists(self.uri):
                body = self.fs.read_bytes(self.uri)
                try:
                    for raw in json.loads(body):
                        item = SetAside(**raw)
                        items[item.ident] = item
                except (ValueError, TypeError) as exc:
                    logger.error(
                        "the list of shares set aside is unreadable; rebuilt from the markers",
                        extra={"error": str(exc)},
                    )
                    items = {i.ident: i for i in self._from_markers()}
                    self._items, self._loaded = items, True
                    self._save()
                    return
            self._items, self._loaded = items, True

    def _from_markers(self) -> list[SetAside]:
        """Every share marked set aside and not yet published or abandoned, in every generation."""
        now = datetime.now(UTC)
        out = []
        for query in self.fs.list(f"{self.output_uri}/{COMMITS_DIR}"):
            if not query.is_dir:
                continue
            names = {i.name for i in self.fs.list(query.uri)}
            for name in names:
                if not name.endswith(".deferred"):
                    continue
                stem = name.removesuffix(".deferred")  # <batch>.<table>
                if f"{stem}.published" in names or f"{stem}.abandoned" in names:
                    continue
                batch, _, table = stem.partition(".")
                out.append(SetAside(query.name, int(batch), table, now.isoformat()))
        return out

    def __len__(self) -> int:
        self._load()
        with self._lock:
            return len(self._items)

    @property
    def room(self) -> bool:
        """May another share be set aside?"""
        return len(self) < self.limit

    def items(self) -> list[SetAside]:
        """Every share set aside (raises when the list cannot be read)."""
        self._load()
        with self._lock:
            return sorted(self._items.values(), key=lambda i: i.ident)

    def tables(self) -> set[str]:
        """The tables with a share set aside (their new shares are set aside at the first failure)."""
        self._load()
        with self._lock:
            return {i.table for i in self._items.values()}

    def add(self, query_id: str, batch_id: int, table: str, now: datetime | None = None) -> None:
        self._load()
        when = now or datetime.now(UTC)
        item = SetAside(query_id, batch_id, table, when.isoformat(), 0, when.timestamp() + _wait(0))
        with self._lock:
            if item.ident in self._items:
                return
            self._items[item.ident] = item
            self._save()
        logger.error("table share set aside: its publication keeps failing", extra=asdict(item))

    def remove(self, item: SetAside) -> None:
        self._load()
        with self._lock:
            if self._items.pop(item.ident, None) is not None:
                self._save()

    def due(self, now: datetime | None = None) -> list[SetAside]:
        """The shares to try now, per table in the order they were set aside (then batch): a table
        is due when its oldest share is, so its shares are tried, and published, in order."""
        self._load()
        t = (now or datetime.now(UTC)).timestamp()
        with self._lock:
            items = sorted(self._items.values(), key=lambda i: (i.since, i.query_id, i.batch_id))
        first: dict[str, SetAside] = {}
        for i in items:
            first.setdefault(i.table, i)
        return [i for i in items if first[i.table].next_at <= t]

    def failed(self, item: SetAside, now: datetime | None = None) -> None:
        """One more failed try: the next after a longer wait."""
        self._load()
        t = (now or datetime.now(UTC)).timestamp()
        tries = item.tries + 1
        with self._lock:
            self._items[item.ident] = replace(item, tries=tries, next_at=t + _wait(tries))
            self._save()

    def _save(self) -> None:
        body = json.dumps([asdict(i) for i in sorted(self._items.values(), key=lambda i: i.ident)], indent=1)
        self.fs.write_bytes(self.uri, body.encode())


def _wait(tries: int) -> float:
    """The project's retry policy (full jitter below a cap that doubles from 1 s), one try at a time."""
    return backoff_s(tries, max_s=MAX_WAIT_S)
