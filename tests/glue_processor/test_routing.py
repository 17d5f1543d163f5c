"""Many datasets, one job (issue 26, item 1): a batch routes its objects to their tables, commits each
table once, exactly once, and one table's failure quarantines or sets aside that table's share only."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from pyiceberg.catalog.sql import SqlCatalog

from glue_processor.metrics.setup import job_metrics
from glue_processor.metrics.sinks import JsonlSink
from glue_processor.table.catalog import open_catalog
from glue_processor.table.iceberg import BATCH_ID
from tests.glue_processor.test_batch import Env

pytestmark = pytest.mark.spark

# every version loaded in full (on_overwrite: append): a table that mirrors its bucket never sets a
# share aside (a later version's replacement needs the earlier one in), see test_mirror_deferred.py
ROUTING = {
    "tables": {
        "orders": {
            "columns": {"amount": "decimal(12,2)", "ts": "timestamp"},
            "partition_by": "day(ts)",
            "on_overwrite": "append",
        },
        "clicks": {
            "columns": {"country": "string"},
            "partition_by": "country",
            "max_columns": 3,
            "on_overwrite": "append",
        },
        "audit": {"target_file_mb": 64, "on_overwrite": "append"},
    },
    "routes": [
        {"prefix": "orders/", "table": "orders"},
        {"prefix": "clicks/", "glob": "*.ndjson", "table": "clicks"},
        {"prefix": "audit/", "table": "audit"},
    ],
    "unmatched": "ignore",
}


def lines(*records: dict[str, Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def routed_env(tmp_path: Path, routing: dict[str, Any] = ROUTING, **overrides: str) -> Env:
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(routing))
    return Env(tmp_path, routes=path.as_uri(), **overrides)


def rows_of(env: Env, table: str) -> list[dict[str, Any]]:
    catalog = open_catalog(env.settings.catalog_uri)
    return catalog.load_table((env.settings.database, table)).scan().to_arrow().to_pylist()


def snapshots_of(env: Env, table: str) -> list[str]:
    catalog = open_catalog(env.settings.catalog_uri)
    metadata = catalog.load_table((env.settings.database, table)).metadata
    return [
        s.summary[BATCH_ID] for s in metadata.snapshots if s.summary and BATCH_ID in s.summary.additional_properties
    ]


def history(env: Env) -> list[dict[str, Any]]:
    table = open_catalog(env.settings.catalog_uri).load_table((env.settings.database, "load_history"))
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: (r["batch_id"], r["key"]))


def emitted(path: Path, name: str, table: str | None = None) -> float:
    lines_ = path.read_text().splitlines() if path.exists() else []
    return sum(
        d["value"] for d in map(json.loads, lines_) if d["name"] == name and d["dimensions"].get("Table") == table
    )


def test_a_batch_writes_each_table_its_objects_once_with_its_own_schema_and_partitions(
    spark: Any, tmp_path: Path
) -> None:
    env = routed_env(tmp_path)
    job = env.job(spark)
    job.metrics = job_metrics(spark, env.settings, sinks=[JsonlSink(tmp_path / "metrics.jsonl")])
    # Given objects of three datasets under their prefixes, and one no route takes
    entries = [
        env.put("orders/a.json", lines({"id": 1, "amount": "12.50", "ts": "2026-11-01T10:00:00Z"})),
        env.put("orders/b.json", lines({"id": 2, "amount": "oops", "ts": "2026-11-02T10:00:00Z"})),
        env.put("clicks/c.ndjson", lines({"u": "x", "country": "fr"}, {"u": "y", "country": "de", "z": 1, "w": 2})),
        env.put("clicks/skip.json", lines({"u": "not this: the glob wants .ndjson"})),
        env.put("audit/d.json", lines({"who": "me", "what": {"k": [1, 2]}})),
        env.put("elsewhere/e.json", lines({"nobody": "routes this"})),
    ]
    # When one batch runs
    record = job.run([env.manifest("m0", entries)], 0)
    # Then each table holds its own rows once, with its declared types and its own columns
    orders = sorted(rows_of(env, "orders"), key=lambda r: r["id"])
    assert [(r["id"], str(r["amount"]), r["_rescued"]) for r in orders] == [
        ("1", "12.50", None),
        ("2", "None", [("amount", "oops")]),
    ]
    clicks = rows_of(env, "clicks")
    assert sorted(r["u"] for r in clicks) == ["x", "y"]
    # the clicks table's column bound is its own (3): country, u and one more; the rest in _extra
    assert sum(1 for r in clicks if r.get("_extra")) == 1
    assert [r["what"] for r in rows_of(env, "audit")] == ['{"k":[1,2]}']
    assert "amount" not in {
        f.name for f in open_catalog(env.settings.catalog_uri).load_table(("ingest", "audit")).schema().fields
    }
    # And each table was committed once by this batch, partitioned as its routing says
    assert [snapshots_of(env, t) for t in ("orders", "clicks", "audit")] == [["0"], ["0"], ["0"]]
    orders_table = open_catalog(env.settings.catalog_uri).load_table(("ingest", "orders"))
    clicks_table = open_catalog(env.settings.catalog_uri).load_table(("ingest", "clicks"))
    assert [f.name for f in orders_table.spec().fields] == ["ts_day"]
    assert [f.name for f in clicks_table.spec().fields] == ["country"]
    # And the objects no route takes are not read: listed as ignored, with their table unset
    status = {s.key: (s.status, s.table) for s in record.sources}
    assert status == {
        "orders/a.json": ("ingested", "orders"),
        "orders/b.json": ("ingested", "orders"),
        "clicks/c.ndjson": ("ingested", "clicks"),
        "clicks/skip.json": ("ignored", None),
        "audit/d.json": ("ingested", "audit"),
        "elsewhere/e.json": ("ignored", None),
    }
    # And the load history says which table each object went to, and the snapshot that holds it
    got = {r["key"]: (r["table_name"], r["status"], r["snapshot_id"] is not None) for r in history(env)}
    assert got["orders/a.json"] == ("ingest.orders", "ingested", True)
    assert got["clicks/c.ndjson"] == ("ingest.clicks", "ingested", True)
    assert got["elsewhere/e.json"] == (None, "ignored", False)
    # And the metrics carry each table's share (Table dimension), and the job's totals
    job.metrics.publisher.flush()
    metrics = tmp_path / "metrics.jsonl"
    assert emitted(metrics, "RecordsOut", "orders") == 2 and emitted(metrics, "RecordsOut", "clicks") == 2
    assert emitted(metrics, "RecordsOut", "audit") == 1 and emitted(metrics, "RecordsOut") == 5
    assert emitted(metrics, "UnroutedObjects") == 2
    assert emitted(metrics, "TableCommitDuration", "orders") > 0
    # And a replay of the batch publishes nothing more anywhere
    env.job(spark).run([env.manifest("m0", entries)], 0)
    assert [len(snapshots_of(env, t)) for t in ("orders", "clicks", "audit")] == [1, 1, 1]
    assert len(history(env)) == 6


def test_a_table_that_refuses_its_share_is_quarantined_and_the_other_tables_go_on(spark: Any, tmp_path: Path) -> None:
    env = routed_env(tmp_path)
    job = env.job(spark)
    # Given the orders table knows a key no catalog accepts as a column name (as an old record could carry)
    job._resumed = True
    job.memory.keys["orders"].add("bad\nname")
    # When a batch brings objects of orders and of clicks
    entries = [
        env.put("orders/a.json", lines({"id": 1, "bad\nname": 1, "ts": "2026-11-01T10:00:00Z"})),
        env.put("clicks/c.ndjson", lines({"u": "x", "country": "fr"})),
    ]
    record = job.run([env.manifest("m0", entries)], 0)
    # Then the orders share is refused before the commit record: its object quarantined whole, with the cause
    share = record.share("orders")
    assert share is not None and share.data_files == () and "refuses" in (share.refused or "")
    (quarantined,) = [r for r in env.quarantine() if r["kind"] == "file"]
    assert quarantined["source_uri"] == "s3://landing/orders/a.json" and "table orders" in quarantined["reason"]
    assert rows_of(env, "orders") == []
    assert not list((tmp_path / "output" / "orders").rglob("*.parquet"))  # its files are removed
    # And the clicks table went on: its rows are in, and the batch did not fail
    assert [r["u"] for r in rows_of(env, "clicks")] == ["x"]
    assert {s.key: s.status for s in record.sources} == {"orders/a.json": "rejected", "clicks/c.ndjson": "ingested"}
    assert not (tmp_path / "output" / "_failures").exists()
    # And the refused object is not remembered as loaded: a restarted job (the bad key gone) loads it on a requeue
    again = env.put("orders/a.json", lines({"id": 1, "bad\nname": 1, "ts": "2026-11-01T10:00:00Z"}))
    env.job(spark).run([env.manifest("m1", [again])], 1)
    assert [r["id"] for r in rows_of(env, "orders")] == ["1"]


class FailingFor:
    """The catalog's commits to one table fail while ``errors`` has any left; every other table's pass."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, table: str, errors: int) -> None:
        self.table, self.errors, self.calls = table, errors, 0
        real = SqlCatalog.commit_table

        def commit_table(catalog: Any, tbl: Any, requirements: Any, updates: Any) -> Any:
            if tbl.name()[-1] == self.table:
                self.calls += 1
                if self.errors > 0:
                    self.errors -= 1
                    raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "UpdateTable")
            return real(catalog, tbl, requirements, updates)

        monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)


def test_a_table_whose_publication_keeps_failing_is_set_aside_and_published_later_exactly_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = routed_env(tmp_path, publish_hold_seconds="5")
    job = env.job(spark)
    job.metrics = job_metrics(spark, env.settings, sinks=[JsonlSink(tmp_path / "metrics.jsonl")])
    job.sleep = lambda s: None
    job.start()
    # Given the clicks table's catalog entry refuses the job's commits for a while (access denied)
    failing = FailingFor(monkeypatch, "clicks", errors=1000)
    # When a batch brings objects of orders and of clicks
    first = [
        env.put("orders/a.json", lines({"id": 1, "amount": "1.00", "ts": "2026-11-01T10:00:00Z"})),
        env.put("clicks/c.ndjson", lines({"u": "x", "country": "fr"})),
    ]
    job.run([env.manifest("m0", first)], 0)
    # Then orders is published and the batch is done: clicks' share was set aside after its hold
    assert [r["id"] for r in rows_of(env, "orders")] == ["1"] and rows_of(env, "clicks") == []
    assert failing.calls >= 2
    deferred = json.loads((tmp_path / "output" / "_deferred" / "shares.json").read_text())
    assert [(d["batch_id"], d["table"]) for d in deferred] == [(0, "clicks")]
    assert [r["key"] for r in history(env)] == ["orders/a.json"]  # clicks' rows come with its publication
    # And the next batches go on for every healthy table while clicks still fails
    job.run([env.manifest("m1", [env.put("orders/b.json", lines({"id": 2, "ts": "2026-11-01T11:00:00Z"}))])], 1)
    assert sorted(r["id"] for r in rows_of(env, "orders")) == ["1", "2"]
    job.metrics.publisher.flush()
    assert emitted(tmp_path / "metrics.jsonl", "PublishFailures", "clicks") >= 2
    assert (
        max(
            d["value"]
            for d in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
            if d["name"] == "DeferredPublications"
        )
        == 1
    )
    # When the cause is fixed and a restarted job runs its next batch
    failing.errors = 0
    restarted = env.job(spark)
    restarted.deferred._items = {k: v.__class__(**{**v.__dict__, "next_at": 0.0}) for k, v in _due(restarted).items()}
    restarted.run([env.manifest("m2", [env.put("audit/d.json", lines({"who": "me"}))])], 2)
    # Then the share set aside is published once, its rows in the history once, and the list is empty
    assert [r["u"] for r in rows_of(env, "clicks")] == ["x"]
    assert snapshots_of(env, "clicks") == ["0"]
    keys = Counter(r["key"] for r in history(env))
    assert keys == {"orders/a.json": 1, "clicks/c.ndjson": 1, "orders/b.json": 1, "audit/d.json": 1}
    assert json.loads((tmp_path / "output" / "_deferred" / "shares.json").read_text()) == []
    # And a replay of the batch that set it aside publishes nothing more
    env.job(spark).run([env.manifest("m0", first)], 0)
    assert snapshots_of(env, "clicks") == ["0"] and len(rows_of(env, "orders")) == 2
    assert Counter(r["key"] for r in history(env)) == keys


def _due(job: Any) -> dict[Any, Any]:
    assert job.deferred is not None
    job.deferred._load()
    return dict(job.deferred._items)


def test_each_table_learns_its_own_columns_across_restarts(spark: Any, tmp_path: Path) -> None:
    env = routed_env(tmp_path)
    job = env.job(spark)
    job.run([env.manifest("m0", [env.put("audit/a.json", lines({"only_audit": 1}))])], 0)
    job.run([env.manifest("m1", [env.put("clicks/b.ndjson", lines({"country": "fr", "c": 2}))])], 1)
    # When a restarted job writes to audit again
    restarted = env.job(spark)
    restarted.run([env.manifest("m2", [env.put("audit/c.json", lines({"other": 3}))])], 2)
    # Then each table knows its own keys only, as before the restart
    assert restarted.memory.keys_of("audit") == {"only_audit", "other"}
    assert restarted.memory.keys_of("clicks") == {"country", "c"}
    audit = open_catalog(env.settings.catalog_uri).load_table(("ingest", "audit")).schema()
    assert "c" not in {f.name for f in audit.fields} and "only_audit" in {f.name for f in audit.fields}
