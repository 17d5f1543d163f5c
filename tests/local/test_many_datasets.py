"""Issue 26's measure, small: three datasets under three prefixes (different shapes, one declared
schema, one partitioned by a record field) through `make run ROUTES=`, and a fourth backfilled from
an inventory file; every record in its table exactly once, the load history matching the landing
folder object for object."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from glue_processor.local.backfill import Selection, local_backfill, write_local_inventory
from glue_processor.local.layout import LANDING_BUCKET
from glue_processor.table.catalog import open_catalog
from tests.local.test_end_to_end import run_local, write_tree

ROUTES = """
tables:
  orders:
    columns: {amount: "decimal(12,2)", qty: bigint, ts: timestamp}
    partition_by: day(ts)
  clicks:
    columns: {country: string}
    partition_by: country
  audit: {}
  legacy: {}
routes:
  - {prefix: orders/, table: orders}
  - {prefix: clicks/, glob: "*.ndjson*", table: clicks}
  - {prefix: audit/, table: audit}
  - {prefix: legacy/, table: legacy}
unmatched: ignore
"""


def datasets() -> dict[str, list[dict[str, Any]]]:
    orders = {
        f"orders/2026/11/{n}.json": [
            {"id": f"o{n}-{i}", "amount": f"{i}.{n:02d}", "qty": i, "ts": f"2026-11-0{1 + i % 3}T10:00:00Z"}
            for i in range(20)
        ]
        for n in range(4)
    }
    clicks = {
        f"clicks/{n}.ndjson.gz": [
            {"id": f"c{n}-{i}", "country": ["fr", "de", "es"][i % 3], "path": f"/p/{i}", "ua": {"m": i % 2 == 0}}
            for i in range(30)
        ]
        for n in range(3)
    }
    audit = {f"audit/{n}.jsonl": [{"id": f"a{n}-{i}", f"k{i % 7}": "v" * i} for i in range(15)] for n in range(2)}
    return {**orders, **clicks, **audit, "elsewhere/x.json": [{"id": "nobody routes this"}]}


def table_rows(work: Path, table: str) -> list[dict[str, Any]]:
    catalog = open_catalog(f"sqlite:///{work / 'output' / '_catalog' / 'catalog.db'}")
    return catalog.load_table(("ingest", table)).scan().to_arrow().to_pylist()


def test_three_datasets_and_a_backfilled_fourth_land_in_their_tables_once(tmp_path: Path) -> None:
    data, work, routes = tmp_path / "landing", tmp_path / "work", tmp_path / "routes.yaml"
    routes.write_text(ROUTES)
    live = datasets()
    write_tree(data, live)
    # When make run ROUTES=... ingests the three datasets
    first = run_local("--data", str(data), "--workdir", str(work), "--routes", str(routes))
    assert first.returncode == 0, first.stderr[-3000:]
    # And a fourth dataset that landed without events is backfilled from the folder's inventory
    old = {f"legacy/{n}.json": [{"id": f"l{n}-{i}", "old": True} for i in range(10)] for n in range(3)}
    write_tree(data, old)
    report = local_backfill(work, write_local_inventory(work), Selection(prefix="legacy/"), rate_mb_s=0)
    assert report.emitted_objects == 3
    second = run_local("--data", str(data), "--workdir", str(work))  # the routing file is kept in WORKDIR
    assert second.returncode == 0, second.stderr[-3000:]
    # Then every record is in its table exactly once
    expected = {"orders": [], "clicks": [], "audit": [], "legacy": []}
    for key, records in {**live, **old}.items():
        table = key.split("/")[0]
        if table in expected:
            expected[table] += [r["id"] for r in records]
    for table, ids in expected.items():
        got = [r["id"] for r in table_rows(work, table)]
        assert Counter(got) == Counter(ids), table
    # with each table's own types and partitioning
    orders = table_rows(work, "orders")
    assert {type(r["qty"]) for r in orders} == {int} and str(orders[0]["amount"]).count(".") == 1
    assert sorted({r["country"] for r in table_rows(work, "clicks")}) == ["de", "es", "fr"]
    # And the load history matches the landing folder object for object
    history = table_rows(work, "load_history")
    landed = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())
    assert sorted(r["key"] for r in history) == landed
    for r in history:
        prefix = r["key"].split("/")[0]
        if prefix == "elsewhere":
            assert (r["status"], r["table_name"]) == ("ignored", None)
        else:
            assert (r["status"], r["table_name"], r["bucket"]) == ("ingested", f"ingest.{prefix}", LANDING_BUCKET)
            assert r["rows_written"] == len({**live, **old}[r["key"]])
    # And only the routed tables (and the load history) exist: no table of --table_name
    catalog = open_catalog(f"sqlite:///{work / 'output' / '_catalog' / 'catalog.db'}")
    assert {t[-1] for t in catalog.list_tables("ingest")} == {*expected, "load_history", "quarantine"}
    # And the run's summary shows each table, and make query sees them all
    assert all(f"ingest.{t}" in first.stdout for t in ("orders", "clicks", "audit"))
    from glue_processor.local.query import connect

    con = connect(work / "output")
    counts = dict(con.sql('SELECT "table", sum(rows)::BIGINT FROM partitions GROUP BY 1').fetchall())
    assert counts == {t: len(ids) for t, ids in expected.items()}
    per_table = dict(
        con.sql("SELECT table_name, count(*) FROM load_history WHERE status = 'ingested' GROUP BY 1").fetchall()
    )
    assert per_table == {"ingest.orders": 4, "ingest.clicks": 3, "ingest.audit": 2, "ingest.legacy": 3}
    metrics = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    by_table = Counter()
    for d in metrics:
        if d["name"] == "RecordsOut" and "Table" in d["dimensions"]:
            by_table[d["dimensions"]["Table"]] += d["value"]
    assert by_table == {t: len(ids) for t, ids in expected.items()}
