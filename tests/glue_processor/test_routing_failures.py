"""One table's failure stays in its table (issue 26, item 1), on the paths an independent review of
the routing change broke: shares set aside together, a list that cannot be read, staged files of a
sink that moves them, shares abandoned after the record (load history, reconcile, the dedupe index),
a table that keeps failing, a table out of reach at start-up, a table the routing no longer names."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from pyiceberg.catalog.sql import SqlCatalog

from glue_processor.commit.deferred import Deferred
from glue_processor.commit.failures import Failures
from glue_processor.commit.ledger import BatchCommitter
from glue_processor.table.catalog import open_catalog
from tests.glue_processor.test_batch import BUCKET, Env
from tests.glue_processor.test_routing import ROUTING, history, lines, routed_env, rows_of, snapshots_of


def started(env: Env, spark: Any) -> Any:
    """The job as the stream starts it, its retries' back-off not waited for."""
    job = env.job(spark)
    job.sleep = lambda s: None
    job.start()
    return job


def force_due(job: Any) -> None:
    job.deferred._load()
    job.deferred._items = {k: dataclasses.replace(v, next_at=0.0) for k, v in job.deferred._items.items()}


def refused_until_abandoned(job: Any, env: Env, failing: CommitsFail, batches: range, prefix: str, field: str) -> None:
    """The table refuses the share's retries for its content (one a batch, each batch one new object
    under ``prefix``, its record ``{field: n}``): after them the share is abandoned, nothing set aside
    any more."""
    failing.code = "ValidationException"
    for n in batches:
        force_due(job)
        job.run([env.manifest(f"m{n}", [env.put(f"{prefix}/{n}.json", lines({field: n}))])], n)
    assert len(job.deferred) == 0


class CommitsFail:
    """The catalog's commits to one table raise a ClientError with ``code`` while ``on``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, table: str, code: str) -> None:
        self.table, self.code, self.on, self.calls = table, code, True, 0
        real = SqlCatalog.commit_table

        def commit_table(catalog: Any, tbl: Any, requirements: Any, updates: Any) -> Any:
            if tbl.name()[-1] == self.table and self.on:
                self.calls += 1
                raise ClientError({"Error": {"Code": self.code, "Message": "injected"}}, "UpdateTable")
            return real(catalog, tbl, requirements, updates)

        monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)


class SlowS3:
    """An object store whose PUTs land out of order (a shorter body takes longer): last writer wins."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def exists(self, uri: str) -> bool:
        return uri in self.objects

    def read_bytes(self, uri: str) -> bytes:
        return self.objects[uri]

    def write_bytes(self, uri: str, body: bytes) -> None:
        time.sleep(max(0.0, 0.3 - len(body) / 3000))
        self.objects[uri] = body


def together(n: int, fn: Any) -> None:
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait()
        fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_shares_set_aside_together_are_all_kept_and_refusals_of_tables_together_all_counted() -> None:
    fs = SlowS3()
    deferred = Deferred(fs, "s3://out", limit=100)  # type: ignore[arg-type]
    together(8, lambda i: deferred.add("q", 7, f"t{i}"))
    # what a restart (or the next checkpoint generation) reads: every one of them
    assert len(Deferred(fs, "s3://out", limit=100)) == 8  # type: ignore[arg-type]
    failures = Failures(fs, "s3://out", "q")  # type: ignore[arg-type]
    together(4, lambda i: failures.record(3, 1, RuntimeError("refused"), key=f"refusals.t{i}"))
    assert sorted(k for k in failures.get(3) if k.startswith("refusals.")) == [f"refusals.t{i}" for i in range(4)]


@pytest.mark.spark
def test_a_list_of_shares_set_aside_that_cannot_be_read_is_rebuilt_from_the_markers(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = routed_env(tmp_path, publish_hold_seconds="0")
    job = env.job(spark)
    job.sleep = lambda s: None
    CommitsFail(monkeypatch, "clicks", "AccessDeniedException")
    job.run([env.manifest("m0", [env.put("clicks/c.ndjson", lines({"u": "x", "country": "fr"}))])], 0)
    # Given the list got damaged (a half-written file, a hand edit)
    listing = tmp_path / "output" / "_deferred" / "shares.json"
    listing.write_text('[{"query_id": "01234')
    # Then a restarted job rebuilds it from the markers beside the commit records, and goes on
    restarted = env.job(spark)
    assert [(i.batch_id, i.table) for i in restarted.deferred._items_after_load()] == [(0, "clicks")]
    assert json.loads(listing.read_text())[0]["table"] == "clicks"


def _items_after_load(self: Deferred) -> list[Any]:
    self._load()
    return list(self._items.values())


Deferred._items_after_load = _items_after_load  # type: ignore[attr-defined]


@pytest.mark.spark
def test_one_table_that_moves_its_files_never_sets_a_batch_aside_it_waits(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import glue_processor.table.hive as hive

    # Given hive-parquet (files staged, then moved) whose moves fail for a while (S3 503s)
    env = Env(tmp_path, table_format="hive-parquet", publish_hold_seconds="0", load_history_table="")
    job = env.job(spark)
    waits: list[float] = []
    job.sleep = waits.append
    real_move, fails = hive._move, {"left": 4}

    def move(fs: Any, item: Any) -> None:
        if fails["left"] and "/output/" in item.final:
            fails["left"] -= 1
            raise OSError("SlowDown (503)")
        real_move(fs, item)

    monkeypatch.setattr(hive, "_move", move)
    job.run([env.manifest("m0", [env.put("a.json", lines({"id": 1}))])], 0)
    # Then the batch waited its publication out (nothing set aside, its staged files kept) and landed
    assert len(waits) == 4 and not (tmp_path / "output" / "_deferred").exists()
    assert [r["id"] for r in __import__("tests.helpers", fromlist=["read_rows"]).read_rows(tmp_path / "output")] == [
        "1"
    ]


@pytest.mark.spark
def test_a_share_abandoned_after_the_record_is_rejected_in_the_history_and_requeued_by_reconcile(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glue_processor.local.comparison import LandedObject, reconcile
    from glue_processor.local.reconcile import history_loads, loads_of, local_records

    env = routed_env(tmp_path)
    job = started(env, spark)
    # Given a catalog that refuses the clicks share for its content (only the catalog knows why)
    failing = CommitsFail(monkeypatch, "clicks", "ValidationException")
    c = env.put("clicks/c.ndjson", lines({"u": "x", "country": "fr"}))
    o = env.put("orders/a.json", lines({"id": 1, "ts": "2026-11-01T10:00:00Z"}))
    job.run([env.manifest("m0", [o, c])], 0)
    # Then the share is abandoned: the history says its object was rejected, with the cause
    row = next(r for r in history(env) if r["key"] == "clicks/c.ndjson")
    assert (row["status"], row["rows_written"]) == ("rejected", 0) and "ValidationException" in row["reason"]
    # And reconcile, from the history and from the ledger, says it landed and was never loaded
    landed = [LandedObject(BUCKET, x.key, x.etag, x.size) for x in (c, o)]
    table = open_catalog(env.settings.catalog_uri).load_table(("ingest", "load_history"))
    for loads in (history_loads(table), loads_of(local_records(tmp_path))):
        assert [m.key for m in reconcile(landed, loads).never_ingested] == ["clicks/c.ndjson"]
    # And once the cause is fixed, a requeue loads it (the dedupe index does not hold it)
    failing.on = False
    record = job.run([env.manifest("m1", [c])], 1)
    assert [s.status for s in record.sources] == ["ingested"] and [r["u"] for r in rows_of(env, "clicks")] == ["x"]


@pytest.mark.spark
def test_a_share_set_aside_then_abandoned_on_a_retry_is_forgotten_and_rejected_in_the_history(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = routed_env(tmp_path, publish_hold_seconds="0")
    job = started(env, spark)
    failing = CommitsFail(monkeypatch, "clicks", "AccessDeniedException")  # passes with time: set aside
    c = env.put("clicks/c.ndjson", lines({"u": "x", "country": "fr"}))
    job.run([env.manifest("m0", [c])], 0)
    assert len(job.deferred) == 1
    refused_until_abandoned(job, env, failing, range(1, 4), "orders", "id")
    row = next(r for r in history(env) if r["key"] == "clicks/c.ndjson")
    assert row["status"] == "rejected" and "refused" in row["reason"]
    # Then a requeue, the cause fixed, loads it: in this run and in a restarted one alike
    failing.on = False
    record = env.job(spark).run([env.manifest("m9", [c])], 9)
    assert [s.status for s in record.sources] == ["ingested"] and [r["u"] for r in rows_of(env, "clicks")] == ["x"]


@pytest.mark.spark
def test_a_table_that_keeps_failing_costs_the_hold_once_not_every_batch(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = routed_env(tmp_path)  # publish_hold_seconds: 120
    job = env.job(spark)
    slept: list[float] = []
    job.sleep = slept.append
    job.start()
    failing = CommitsFail(monkeypatch, "clicks", "AccessDeniedException")
    waited = []
    for n in range(4):
        before = sum(slept)
        entries = [
            env.put(f"orders/{n}.json", lines({"id": n, "ts": "2026-11-01T10:00:00Z"})),
            env.put(f"clicks/{n}.ndjson", lines({"u": str(n), "country": "fr"})),
        ]
        job.run([env.manifest(f"m{n}", entries)], n)
        waited.append(sum(slept) - before)
    # Then the first batch waited out the hold; the next ones set clicks aside at its first failure
    assert waited[0] >= 120 and waited[1:] == [0, 0, 0]
    assert len(job.deferred) == 4 and sorted(r["id"] for r in rows_of(env, "orders")) == ["0", "1", "2", "3"]
    # And when the table is back, its shares go in, oldest first, each once
    failing.on = False
    force_due(job)
    job.run([env.manifest("m9", [env.put("audit/9.json", lines({"n": 9}))])], 9)
    assert sorted(r["u"] for r in rows_of(env, "clicks")) == ["0", "1", "2", "3"] and len(job.deferred) == 0
    assert sorted(snapshots_of(env, "clicks")) == ["0", "1", "2", "3"]


@pytest.mark.spark
def test_a_table_out_of_reach_at_start_up_does_not_stop_the_others(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = routed_env(tmp_path)
    env.job(spark).start()  # the three tables exist
    real = SqlCatalog.load_table

    def load_table(catalog: Any, identifier: Any) -> Any:
        if tuple(identifier)[-1] == "clicks":
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "GetTable")
        return real(catalog, identifier)

    monkeypatch.setattr(SqlCatalog, "load_table", load_table)
    job = started(env, spark)  # Then the job starts
    job.run([env.manifest("m0", [env.put("orders/a.json", lines({"id": 1, "ts": "2026-11-01T10:00:00Z"}))])], 0)
    assert [r["id"] for r in rows_of(env, "orders")] == ["1"]


@pytest.mark.spark
def test_a_share_abandoned_while_its_batch_is_replayed_is_forgotten(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glue_processor import faults

    env = routed_env(tmp_path)
    job = env.job(spark)
    c = env.put("clicks/c.ndjson", lines({"u": "x", "country": "fr"}))

    def die(name: str) -> None:
        if name == "after-commit-record":
            raise SystemExit(name)

    monkeypatch.setattr(faults, "hit", die)  # the run dies right after the commit record
    with pytest.raises(SystemExit):
        job.run([env.manifest("m0", [c])], 0)
    monkeypatch.setattr(faults, "hit", lambda name: None)
    restarted = env.job(spark)
    restarted.sleep = lambda s: None
    failing = CommitsFail(monkeypatch, "clicks", "ValidationException")
    restarted.run([env.manifest("m0", [c])], 0)  # the replay: the catalog refuses the share, abandoned
    failing.on = False
    record = restarted.run([env.manifest("m1", [c])], 1)  # requeued once the cause is fixed
    assert [s.status for s in record.sources] == ["ingested"] and [r["u"] for r in rows_of(env, "clicks")] == ["x"]


@pytest.mark.spark
@pytest.mark.parametrize("with_data", [False, True])
def test_a_share_of_a_table_the_routing_no_longer_names_is_published_to_the_table_as_it_is(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_data: bool
) -> None:
    env = routed_env(tmp_path, publish_hold_seconds="0")
    job = started(env, spark)
    if with_data:  # the table holds a batch already, partitioned by day(ts)
        job.run([env.manifest("p0", [env.put("orders/z.json", lines({"id": 0, "ts": "2026-10-01T10:00:00Z"}))])], 100)
    failing = CommitsFail(monkeypatch, "orders", "AccessDeniedException")
    job.run([env.manifest("m0", [env.put("orders/a.json", lines({"id": 1, "ts": "2026-11-01T10:00:00Z"}))])], 0)
    assert len(job.deferred) == 1
    failing.on = False
    # Given the operator dropped orders from the routing file, and the job restarted with it
    routing = {
        "tables": {k: v for k, v in ROUTING["tables"].items() if k != "orders"},
        "routes": [r for r in ROUTING["routes"] if r["table"] != "orders"],
        "unmatched": "ignore",
    }
    (tmp_path / "routes.json").write_text(json.dumps(routing))
    restarted = env.job(spark)
    restarted.sleep = lambda s: None
    force_due(restarted)
    restarted.run([env.manifest("m1", [env.put("audit/1.json", lines({"n": 1}))])], 1)
    # Then the share set aside is published to orders, whose partitioning is left as it was
    orders = open_catalog(env.settings.catalog_uri).load_table(("ingest", "orders"))
    assert [f.name for f in orders.spec().fields] == ["ts_day"] and len(restarted.deferred) == 0
    assert sorted(r["id"] for r in rows_of(env, "orders")) == (["0", "1"] if with_data else ["1"])
    # And the next batches go on
    restarted.run([env.manifest("m2", [env.put("audit/2.json", lines({"n": 2}))])], 2)
    assert len(rows_of(env, "audit")) == 2


# -- a second review, of the fixes above -----------------------------------------------------------


@pytest.mark.spark
def test_an_object_forgotten_after_the_dedupe_snapshot_stays_forgotten_across_a_restart(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import glue_processor.plan.memory as memory

    env = routed_env(tmp_path, publish_hold_seconds="0")
    job = started(env, spark)
    failing = CommitsFail(monkeypatch, "clicks", "AccessDeniedException")
    c = env.put("clicks/c.ndjson", lines({"u": "x", "country": "fr"}))
    job.run([env.manifest("m0", [c])], 0)  # set aside: its object is remembered as loaded
    # Given the dedupe snapshot taken while the share waits (it remembers the object)
    monkeypatch.setattr(memory, "DEDUPE_SNAPSHOT_BATCHES", 1)
    job.run([env.manifest("m1", [env.put("audit/1.json", lines({"n": 1}))])], 1)
    monkeypatch.setattr(memory, "DEDUPE_SNAPSHOT_BATCHES", 60)
    job.memory._since_snapshot = 0
    refused_until_abandoned(job, env, failing, range(2, 5), "audit", "n")  # then the share is abandoned
    # When the job restarts before the next snapshot, and the object is requeued (the cause fixed)
    failing.on = False
    record = env.job(spark).run([env.manifest("m9", [c])], 9)
    # Then it loads: the abandoned marker is the truth, whatever the snapshot remembered
    assert [s.status for s in record.sources] == ["ingested"] and [r["u"] for r in rows_of(env, "clicks")] == ["x"]


@pytest.mark.spark
def test_shares_set_aside_are_published_even_once_the_routing_has_one_table(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = routed_env(tmp_path, publish_hold_seconds="0")
    job = started(env, spark)
    failing = CommitsFail(monkeypatch, "clicks", "AccessDeniedException")
    job.run([env.manifest("m0", [env.put("clicks/c.ndjson", lines({"u": "x", "country": "fr"}))])], 0)
    failing.on = False
    # Given clicks and audit moved to another job: this job's routing names orders alone
    one = {"tables": {"orders": ROUTING["tables"]["orders"]}, "routes": [{"prefix": "orders/", "table": "orders"}]}
    (tmp_path / "routes.json").write_text(json.dumps(one))
    restarted = env.job(spark)
    restarted.sleep = lambda s: None
    force_due(restarted)
    restarted.run([env.manifest("m1", [env.put("orders/1.json", lines({"id": 1, "ts": "2026-11-01T10:00:00Z"}))])], 1)
    # Then the share set aside before is published, and the list is empty
    assert [r["u"] for r in rows_of(env, "clicks")] == ["x"] and len(restarted.deferred) == 0


def test_a_list_that_could_not_be_read_is_read_again_not_overwritten() -> None:
    class FlakyFS:
        def __init__(self) -> None:
            self.objects: dict[str, bytes] = {}
            self.fail_reads = 0

        def exists(self, uri: str) -> bool:
            return uri in self.objects

        def read_bytes(self, uri: str) -> bytes:
            if self.fail_reads:
                self.fail_reads -= 1
                raise OSError("SlowDown (503)")
            return self.objects[uri]

        def write_bytes(self, uri: str, body: bytes) -> None:
            self.objects[uri] = body

    fs = FlakyFS()
    first = Deferred(fs, "s3://out", limit=100)  # type: ignore[arg-type]
    for b in range(5):
        first.add("q", b, "clicks")
    restarted = Deferred(fs, "s3://out", limit=100)  # type: ignore[arg-type]
    fs.fail_reads = 1
    with pytest.raises(OSError, match="SlowDown"):
        restarted.due()  # S3 throttled the read: the list stays unread
    restarted.add("q", 9, "orders")  # Then the next use reads it, and keeps every entry
    assert sorted(i.batch_id for i in Deferred(fs, "s3://out", limit=100)._items_after_load()) == [0, 1, 2, 3, 4, 9]  # type: ignore[arg-type, attr-defined]


@pytest.mark.spark
def test_a_share_committed_while_its_table_was_out_of_reach_is_checked_at_publication_and_abandoned(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.types import LongType

    env = routed_env(tmp_path, publish_hold_seconds="0")
    env.job(spark).start()
    audit = open_catalog(env.settings.catalog_uri).load_table(("ingest", "audit"))
    with audit.update_schema() as update:  # another writer made `n` a long
        update.add_column("n", LongType())
    real = SqlCatalog.load_table
    state = {"down": True}

    def load_table(catalog: Any, identifier: Any) -> Any:
        if tuple(identifier)[-1] == "audit" and state["down"]:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "GetTable")
        return real(catalog, identifier)

    monkeypatch.setattr(SqlCatalog, "load_table", load_table)
    job = started(env, spark)  # audit out of reach: the job starts, and the batch's check of it cannot run
    job.run([env.manifest("m0", [env.put("audit/a.json", lines({"n": "not a number", "z": "new"}))])], 0)
    assert len(job.deferred) == 1
    state["down"] = False
    for n in range(1, 5):
        force_due(job)
        job.run(
            [env.manifest(f"m{n}", [env.put(f"orders/{n}.json", lines({"id": n, "ts": "2026-11-01T10:00:00Z"}))])], n
        )
    # Then its schema change, checked at publication, counts as its content: abandoned after 3 refusals
    assert len(job.deferred) == 0
    assert list((tmp_path / "output" / "_commits").glob("*/*.audit.abandoned"))
    assert next(r for r in history(env) if r["key"] == "audit/a.json")["status"] == "rejected"


def _columns(env: Env, table: str) -> list[str]:
    return [f.name for f in open_catalog(env.settings.catalog_uri).load_table(("ingest", table)).schema().fields]


def not_due(job: Any) -> None:
    """The shares set aside wait an hour for their next try (saved: a restarted job reads it)."""
    job.deferred._load()
    later = time.time() + 3600
    job.deferred._items = {k: dataclasses.replace(v, next_at=later) for k, v in job.deferred._items.items()}
    job.deferred._save()


def _resumed_refusing_record_0(env: Env, spark: Any, monkeypatch: pytest.MonkeyPatch, *, restore: bool = False) -> Any:
    """A restarted job, resumed while S3 refuses the first read of batch 0's commit record
    (``restore``: every read works again once it has resumed)."""
    real, refusals = BatchCommitter.load, [1]

    def load(self: BatchCommitter, batch_id: int) -> Any:
        if batch_id == 0 and refusals[0] > 0:
            refusals[0] -= 1
            raise ClientError({"Error": {"Code": "SlowDown", "Message": "injected"}}, "GetObject")
        return real(self, batch_id)

    monkeypatch.setattr(BatchCommitter, "load", load)
    job = started(env, spark)
    job.resume()
    job._resumed = True
    if restore:
        monkeypatch.setattr(BatchCommitter, "load", real)
    return job


def _kind_then_its_case_variant(job: Any, env: Env, monkeypatch: pytest.MonkeyPatch, restart: Any = None) -> Any:
    """Batch 0 brings audit's new key ``kind`` and is set aside (the catalog refuses for a while);
    batch 1, the catalog back but batch 0 not due yet, brings ``Kind`` and ``kind``; then batch 0 is
    published. Returns the job that ran batch 1 (``restart``: a new one, after batch 0)."""
    failing = CommitsFail(monkeypatch, "audit", "AccessDeniedException")
    job.run([env.manifest("m0", [env.put("audit/0.json", lines({"u": "a", "kind": "x"}))])], 0)
    assert len(job.deferred) == 1
    not_due(job)
    failing.on = False
    if restart is not None:
        job = restart()
    later = lines({"u": "b", "Kind": "y"}, {"u": "c", "kind": "z"})
    job.run([env.manifest("m1", [env.put("audit/1.json", later)])], 1)
    assert len(job.deferred) == 1  # batch 1 went in first
    force_due(job)
    job.run([env.manifest("m2", [env.put("orders/2.json", lines({"id": 2, "ts": "2026-11-01T10:00:00Z"}))])], 2)
    assert len(job.deferred) == 0
    return job


def _one_kind_column(env: Env) -> None:
    columns = _columns(env, "audit")
    assert "kind" in columns and "Kind" not in columns
    assert len({c.lower() for c in columns}) == len(columns)  # what a case-insensitive catalog requires
    rows = sorted(rows_of(env, "audit"), key=lambda r: r["u"])
    assert [(r["u"], r["kind"], dict(r["_extra"] or [])) for r in rows] == [
        ("a", "x", {}),
        ("b", None, {"Kind": "y"}),
        ("c", "z", {}),
    ]
    assert {r["key"]: r["status"] for r in history(env) if r["key"].startswith("audit/")} == {
        "audit/0.json": "ingested",
        "audit/1.json": "ingested",
    }


@pytest.mark.spark
def test_a_later_share_takes_no_case_variant_of_a_key_of_a_share_set_aside(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Published before the share set aside, batch 1 used to make ``Kind`` a column and name ``kind``
    ``kind__2``; the share set aside then added ``kind``: ``Kind`` and ``kind`` in one table, which
    a case-insensitive catalog (Glue) refuses, so that share would never have gone in."""
    env = routed_env(tmp_path, publish_hold_seconds="0")
    _kind_then_its_case_variant(started(env, spark), env, monkeypatch)
    _one_kind_column(env)


@pytest.mark.spark
def test_a_restarted_job_holds_the_keys_of_the_shares_still_set_aside(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = routed_env(tmp_path, publish_hold_seconds="0")

    def restart() -> Any:
        # the restart replays batch 0's record: its keys are held from it, even with S3 refusing
        # another read of it
        job = _resumed_refusing_record_0(env, spark, monkeypatch, restore=True)
        assert job.memory.held_keys("audit") == {"u", "kind"}  # batch 0's keys, new to the table
        return job

    restarted = _kind_then_its_case_variant(started(env, spark), env, monkeypatch, restart=restart)
    _one_kind_column(env)
    assert "kind" in restarted.memory.keys_of("audit") and not restarted.memory.held_keys("audit")


@pytest.mark.spark
def test_the_keys_of_a_share_set_aside_are_no_columns_of_later_shares_and_go_if_it_is_abandoned(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held keys are names reserved, not columns: a later share without them does not carry them (a
    share refused for its content would have had every later share of its table refused too, and
    an abandoned share's keys stayed in the table for good)."""
    env = routed_env(tmp_path, publish_hold_seconds="0")
    job = started(env, spark)
    failing = CommitsFail(monkeypatch, "audit", "AccessDeniedException")
    job.run([env.manifest("m0", [env.put("audit/0.json", lines({"u": "a", "odd": "x"}))])], 0)
    not_due(job)
    # Held (with u: both new to the table), in this run and in a restarted one (which used to learn
    # them from the record)
    assert job.memory.held_keys("audit") == {"u", "odd"} and "odd" not in job.memory.keys_of("audit")
    job = started(env, spark)
    failing.on = False
    job.run([env.manifest("m1", [env.put("audit/1.json", lines({"u": "b"}))])], 1)
    assert job.memory.held_keys("audit") == {"odd"} and "odd" not in job.memory.keys_of("audit")
    assert "odd" not in _columns(env, "audit") and [r["u"] for r in rows_of(env, "audit")] == ["b"]
    # When the share set aside is refused for its content until abandoned, its key is released
    failing.on = True
    refused_until_abandoned(job, env, failing, range(2, 5), "orders", "id")
    assert not job.memory.held_keys("audit") and "odd" not in job.memory.keys_of("audit")
    failing.on = False
    job.run([env.manifest("m9", [env.put("audit/9.json", lines({"u": "c", "Odd": "y"}))])], 9)
    assert "odd" not in _columns(env, "audit") and "Odd" in _columns(env, "audit")


@pytest.mark.spark
def test_a_share_committed_then_set_aside_by_its_replay_after_a_restart_holds_its_keys(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run dies between the commit record and the publication; the restart replays the batch and
    sets the share aside. Its keys used to be learnt from the record at the restart: every later
    share of the table then carried them."""
    from glue_processor import faults

    env = routed_env(tmp_path, publish_hold_seconds="0")
    job = started(env, spark)
    a = env.put("audit/0.json", lines({"u": "a", "odd": "x"}))

    def die(name: str) -> None:
        if name == "after-commit-record":
            raise SystemExit(name)

    monkeypatch.setattr(faults, "hit", die)
    with pytest.raises(SystemExit):
        job.run([env.manifest("m0", [a])], 0)
    monkeypatch.setattr(faults, "hit", lambda name: None)
    failing = CommitsFail(monkeypatch, "audit", "AccessDeniedException")
    restarted = started(env, spark)
    restarted.run([env.manifest("m0", [a])], 0)  # the replay: set aside
    assert len(restarted.deferred) == 1 and "odd" not in restarted.memory.keys_of("audit")
    assert restarted.memory.held_keys("audit") == {"u", "odd"}
    not_due(restarted)
    failing.on = False
    restarted.run([env.manifest("m1", [env.put("audit/1.json", lines({"u": "b"}))])], 1)
    assert "odd" not in _columns(env, "audit") and [r["u"] for r in rows_of(env, "audit")] == ["b"]


@pytest.mark.spark
def test_a_share_set_aside_whose_record_cannot_be_read_at_a_restart_is_held_before_a_later_batch(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share set aside before the dedupe snapshot is not replayed: its record is read at the
    restart. A read S3 refuses is tried again before each batch rather than given up."""
    import glue_processor.plan.memory as memory

    monkeypatch.setattr(memory, "DEDUPE_SNAPSHOT_BATCHES", 1)  # a snapshot after every batch
    env = routed_env(tmp_path, publish_hold_seconds="0")
    job = started(env, spark)
    failing = CommitsFail(monkeypatch, "audit", "AccessDeniedException")
    job.run([env.manifest("m0", [env.put("audit/0.json", lines({"u": "a", "kind": "x"}))])], 0)
    job.run([env.manifest("m1", [env.put("orders/1.json", lines({"id": 1, "ts": "2026-11-01T10:00:00Z"}))])], 1)
    not_due(job)
    failing.on = False
    restarted = _resumed_refusing_record_0(env, spark, monkeypatch)
    assert restarted.memory.held_keys("audit") == set() and restarted._unheld  # refused once
    later = lines({"u": "b", "Kind": "y"}, {"u": "c", "kind": "z"})
    restarted.run([env.manifest("m2", [env.put("audit/2.json", later)])], 2)  # read again first
    assert not restarted._unheld
    force_due(restarted)
    restarted.run([env.manifest("m3", [env.put("orders/3.json", lines({"id": 3, "ts": "2026-11-01T10:00:00Z"}))])], 3)
    assert len(restarted.deferred) == 0
    columns = _columns(env, "audit")
    assert "kind" in columns and len({c.lower() for c in columns}) == len(columns)


@pytest.mark.spark
@pytest.mark.parametrize("held", ["kind__2", "Kind__2"])
def test_new_cases_of_each_other_never_take_the_name_of_a_key_held_for_a_share_set_aside(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: str
) -> None:
    """Batch 0 brings ``kind__2`` (or ``Kind__2``) and is set aside; batch 1, published first, brings
    ``kind`` and ``Kind``. Named together, those two are ``Kind`` and ``kind__2``: batch 1's ``kind``
    would have had the column that batch 0's key goes into (or another case of it, which Glue
    refuses beside it)."""
    env = routed_env(tmp_path, publish_hold_seconds="0")
    job = started(env, spark)
    failing = CommitsFail(monkeypatch, "audit", "AccessDeniedException")
    job.run([env.manifest("m0", [env.put("audit/0.json", lines({"u": "a", held: "x"}))])], 0)
    assert len(job.deferred) == 1
    not_due(job)
    failing.on = False
    job.run([env.manifest("m1", [env.put("audit/1.json", lines({"u": "b", "Kind": "y"}, {"u": "c", "kind": "z"}))])], 1)
    assert len(job.deferred) == 1  # batch 1 went in first
    force_due(job)
    job.run([env.manifest("m2", [env.put("orders/2.json", lines({"id": 2, "ts": "2026-11-01T10:00:00Z"}))])], 2)
    assert len(job.deferred) == 0
    columns = _columns(env, "audit")
    assert len({c.lower() for c in columns}) == len(columns)
    # Then the column kind__2 holds batch 0's value alone, and each value is under its own key
    rows = {r["u"]: r for r in rows_of(env, "audit")}
    assert {u: r[held] for u, r in rows.items()} == {"a": "x", "b": None, "c": None}
    for u, key, value in (("b", "Kind", "y"), ("c", "kind", "z")):
        assert rows[u].get(key) == value or dict(rows[u]["_extra"] or [])[key] == value
