"""Issue 47's rules end to end, as a user runs them: the README's routing file (two tables, a rule of
each ``on_fail``, rules over a declared decimal and a timestamp) through ``make run ROUTES=``, then
``make query`` on the tables, the quarantine table and the load history; and a rule that cannot
work, refused before anything runs."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.local.test_first_hour import ROOT, make, user_error

pytestmark = pytest.mark.spark


def readme_routing() -> str:
    """The routing file the README shows, as printed."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "expect:" in b]
    return block


ORDERS = [
    {"id": "o1", "amount": "12.50", "ts": "2026-11-01T10:00:00Z"},
    {"id": "o2", "amount": "-3.00", "ts": "2026-11-01T10:00:00Z"},  # positive_amount: quarantined
    {"id": "o3", "amount": "7", "ts": "2019-06-01T00:00:00Z"},  # recent (warn): kept, counted
    {"id": "o4", "amount": "lots", "ts": "2026-11-01T10:00:00Z"},  # no decimal: NULL, rescued, quarantined
    {"id": "o5", "ts": "2026-11-02T10:00:00Z"},  # no amount: NULL, quarantined
]
CLICKS = [
    {"id": "c1", "country": "DE", "user_id": "u1"},
    {"id": "c2", "country": "XX", "user_id": "u2"},  # known_country (drop): not kept
    {"id": "c3", "country": "FR"},  # has_user: quarantined
    {"id": "c4", "country": "de", "user_id": "u4"},  # known_country is case-sensitive: dropped
    {"id": "c5", "country": "US", "user_id": "u5"},
]


def lines(records: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def query(work: Path, sql: str) -> list[dict[str, str]]:
    """The rows ``make query`` prints (as CSV, each value as text)."""
    out = make("query", f"WORKDIR={work}", f"SQL={sql}", "FORMAT=csv")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return list(csv.DictReader(io.StringIO(out.stdout)))


def test_the_readmes_rules_keep_quarantine_drop_and_count_through_make_run_routes(tmp_path: Path) -> None:
    # Given the README's routing file and a day of orders and clicks
    routes, data, work = tmp_path / "routes.yaml", tmp_path / "landing", tmp_path / "work"
    routes.write_text(readme_routing())
    (data / "incoming/orders").mkdir(parents=True)
    (data / "incoming/clicks").mkdir(parents=True)
    (data / "incoming/orders/a.ndjson").write_bytes(lines(ORDERS))
    (data / "incoming/clicks/b.ndjson.gz").write_bytes(gzip.compress(lines(CLICKS)))
    # When make run ROUTES=... loads them
    run = make("run", f"DATA={data}", f"WORKDIR={work}", f"ROUTES={routes}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # Then each table holds the rows that kept its quarantine and drop rules (the warned one too)
    orders = query(work, "SELECT id, amount FROM orders ORDER BY id")
    assert [(r["id"], str(r["amount"])) for r in orders] == [("o1", "12.50"), ("o3", "7.00")]
    assert [r["id"] for r in query(work, "SELECT id FROM clicks ORDER BY id")] == ["c1", "c5"]
    # And each quarantined row is a row of the quarantine table, once, with its rule and its line
    got = query(work, "SELECT table_name, key, line, kind, rule, raw FROM quarantine ORDER BY key, line")
    assert [(r["table_name"], r["key"], r["line"], r["kind"], r["rule"]) for r in got] == [
        ("ingest.clicks", "incoming/clicks/b.ndjson.gz", "3", "rule", "has_user"),
        ("ingest.orders", "incoming/orders/a.ndjson", "2", "rule", "positive_amount"),
        ("ingest.orders", "incoming/orders/a.ndjson", "4", "rule", "positive_amount"),
        ("ingest.orders", "incoming/orders/a.ndjson", "5", "rule", "positive_amount"),
    ]
    assert [json.loads(r["raw"]) for r in got] == [CLICKS[2], ORDERS[1], ORDERS[3], ORDERS[4]]
    # And the load history counts each object's breaks per rule, every mode
    history = query(work, "SELECT key, rows_written, lines_quarantined, rule_violations FROM load_history ORDER BY key")
    assert [
        (r["key"], r["rows_written"], r["lines_quarantined"], json.loads(r["rule_violations"])) for r in history
    ] == [
        ("incoming/clicks/b.ndjson.gz", "2", "1", {"has_user": 1, "known_country": 2}),
        ("incoming/orders/a.ndjson", "2", "3", {"positive_amount": 3, "recent": 1}),
    ]
    # And RuleViolations is published per table and rule, and for the job
    datums = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    per_rule = Counter[tuple[str, str]]()
    total = 0.0
    for d in datums:
        if d["name"] == "RuleViolations":
            if "Rule" in d["dimensions"]:
                per_rule[d["dimensions"]["Table"], d["dimensions"]["Rule"]] += d["value"]
            else:
                total += d["value"]
    assert per_rule == {
        ("orders", "positive_amount"): 3,
        ("orders", "recent"): 1,
        ("clicks", "known_country"): 2,
        ("clicks", "has_user"): 1,
    }
    assert total == 7
    # And the run's summary says it per rule, with the query that shows the rows
    assert re.search(
        r"rule positive_amount\s+3 rows of orders\s+broke it: in the quarantine table, not the table", run.stdout
    )
    assert re.search(r"rule known_country\s+2 rows of clicks\s+broke it: dropped", run.stdout), run.stdout
    assert re.search(r"rule recent\s+1 row of orders\s+broke it: kept \(on_fail: warn\)", run.stdout)
    assert "WHERE rule = 'positive_amount'" in run.stdout
    assert re.search(r"rule broken\s+\S*incoming/orders/a.ndjson:2\s+rule positive_amount not kept", run.stdout)


def test_a_rule_that_cannot_work_stops_make_run_before_anything_runs(tmp_path: Path) -> None:
    # Given the README's routing file with one rule that compares a decimal with LIKE
    routes, data, work = tmp_path / "routes.yaml", tmp_path / "landing", tmp_path / "work"
    routes.write_text(readme_routing().replace('"amount > 0"', "\"amount LIKE '1%'\""))
    (data / "incoming/orders").mkdir(parents=True)
    (data / "incoming/orders/a.ndjson").write_bytes(lines(ORDERS))
    # When make run ROUTES=... starts
    run = make("run", f"DATA={data}", f"WORKDIR={work}", f"ROUTES={routes}")
    # Then it stops at once, one line naming the table and the rule, and nothing was fed or loaded
    line = user_error(run)
    assert f"{routes}: table 'orders': rule 'positive_amount' (amount LIKE '1%'): " in line, line
    assert "amount is decimal(12,2)" in line
    assert not (work / "output" / "_commits").exists()


def test_a_rule_over_another_case_of_a_key_is_named_in_the_run_s_summary(tmp_path: Path) -> None:
    # Given a rule over "User_id" where the records say "user_id" (names are case-sensitive: it
    # compiles, a string column, and then reads NULL in every row)
    routes, data, work = tmp_path / "routes.yaml", tmp_path / "landing", tmp_path / "work"
    routes.write_text(readme_routing().replace('"user_id IS NOT NULL"', '"User_id IS NOT NULL"'))
    (data / "incoming/clicks").mkdir(parents=True)
    (data / "incoming/clicks/b.ndjson.gz").write_bytes(gzip.compress(lines(CLICKS)))
    # When make run loads the clicks
    run = make("run", f"DATA={data}", f"WORKDIR={work}", f"ROUTES={routes}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # Then every row broke it, and the summary says which key the rule probably means
    assert re.search(r'rule column User_id\s+table clicks\s+no record has "User_id"; they have "user_id"', run.stdout)
    assert re.search(r"rule has_user\s+5 rows of clicks", run.stdout), run.stdout
    # and the job's log says it as the batch runs (on AWS, where no summary is printed)
    assert "a rule reads a column no record has" in run.stderr


def test_one_table_s_rules_come_from_make_run_expect_and_a_missing_file_is_named(tmp_path: Path) -> None:
    # The README: "One table without a routing file: EXPECT=rules.json (make run)"
    data, work, expect = tmp_path / "landing", tmp_path / "work", tmp_path / "rules.json"
    data.mkdir()
    (data / "a.ndjson").write_bytes(lines([{"id": "1", "sku": "abc"}, {"id": "2", "sku": "toolong"}]))
    expect.write_text(json.dumps({"short_sku": "length(sku) <= 3"}))
    run = make("run", f"DATA={data}", f"WORKDIR={work}", f"EXPECT={expect}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert [r["id"] for r in query(work, "SELECT id FROM events")] == ["1"]
    (row,) = query(work, "SELECT key, line, rule FROM quarantine")
    assert (row["key"], row["line"], row["rule"]) == ("a.ndjson", "2", "short_sku")
    # And a rules file that is not there stops make run in one line naming it
    missing = make("run", f"DATA={data}", f"WORKDIR={tmp_path / 'other'}", f"EXPECT={tmp_path / 'nope.json'}")
    assert f"EXPECT={tmp_path / 'nope.json'} is not a file" in user_error(missing)
