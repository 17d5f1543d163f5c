"""The routing file (issue 26, item 1): one model, YAML or JSON, first match wins, every mistake named."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from contracts.exceptions import ConfigError
from contracts.routing import MAX_ROUTES, MAX_TABLES, Routing, parse_routing
from glue_processor.plan.routes import resolve
from glue_processor.settings import settings_from_mapping

YAML = b"""
tables:
  orders: {columns: {amount: "decimal(12,2)", ts: timestamp}, partition_by: "day(ts)", target_file_mb: 256}
  clicks: {max_columns: 50}
  misc: {}
routes:
  - {prefix: incoming/orders/, table: orders}
  - {prefix: incoming/clicks/, glob: "*.ndjson.gz", table: clicks}
  - {glob: "*/audit/*", table: misc}
  - {prefix: incoming/, table: misc}
unmatched: ignore
"""


def settings(**extra: str) -> Any:
    roots = {k: f"file:///tmp/r/{k}" for k in ("manifest_uri", "output_uri", "quarantine_uri", "checkpoint_uri")}
    return settings_from_mapping({**roots, **extra})


def test_the_first_route_that_matches_the_whole_key_names_the_table() -> None:
    routing = parse_routing(YAML, source="routes.yaml")
    assert routing.table_of("incoming/orders/2026/11/a.json") == "orders"
    assert routing.table_of("incoming/clicks/x.ndjson.gz") == "clicks"
    # a key under the clicks prefix the glob does not take falls through to the next route that matches
    assert routing.table_of("incoming/clicks/x.json") == "misc"
    assert routing.table_of("other/audit/y") == "misc"
    # a key no route takes is ignored; glob characters and new lines in keys are only characters
    assert routing.table_of("elsewhere/z.json") is None
    assert routing.table_of("incoming/orders\n/x") == "misc"
    assert routing.table_of("[a-z]*?") is None
    # and the same file as JSON is the same routing
    assert parse_routing(routing.to_json(), source="routes.json") == routing


def test_unmatched_keys_go_to_the_table_it_names() -> None:
    doc = {"tables": {"a": {}, "rest": {}}, "routes": [{"prefix": "a/", "table": "a"}], "unmatched": "rest"}
    routing = parse_routing(json.dumps(doc))
    assert (routing.table_of("a/1"), routing.table_of("b/1")) == ("a", "rest")
    assert Routing.single("events").table_of("anything/at/all") == "events"


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"tables": {"a": {}}, "routes": [{"table": "b"}]}, "does not declare: ['b']"),
        ({"tables": {"a": {}, "b": {}}, "routes": [{"table": "a"}]}, "no route and not 'unmatched' leads to"),
        ({"tables": {"a": {}}, "routes": [{"table": "a"}], "unmatched": "zz"}, "unmatched is 'zz'"),
        ({"tables": {"Orders": {}}, "routes": [{"table": "Orders"}]}, "tables.Orders"),
        ({"tables": {"a": {"target_file_mb": 0}}, "routes": [{"table": "a"}]}, "tables.a.target_file_mb"),
        ({"tables": {"a": {"max_columns": 10_000}}, "routes": [{"table": "a"}]}, "tables.a.max_columns"),
        ({"tables": {"a": {"colour": "red"}}, "routes": [{"table": "a"}]}, "tables.a.colour"),
        ({"tables": {"a": {}}, "routes": []}, "routes"),
        ({"tables": {"a": {}}, "routes": [{"table": "a"}] * (MAX_ROUTES + 1)}, "routes"),
        ({"tables": {f"t{i}": {} for i in range(MAX_TABLES + 1)}, "routes": [{"table": "t0"}]}, "tables"),
    ],
)
def test_a_bad_routing_file_is_refused_naming_what_is_wrong(doc: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=r"routes\.json") as raised:
        parse_routing(json.dumps(doc), source="routes.json")
    assert says in str(raised.value)


def test_text_that_is_not_a_routing_file_is_refused() -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_routing(b"tables: [unclosed", source="r.yml")
    with pytest.raises(ConfigError, match="not valid JSON"):
        parse_routing(b"{", source="r.json")
    with pytest.raises(ConfigError, match="expected a mapping"):
        parse_routing(b"[]", source="r.json")


def test_each_table_resolves_to_what_its_batches_need_and_bad_tables_stop_the_job() -> None:
    s = settings(target_file_mb="128", max_columns="100")
    tables = resolve(s, parse_routing(YAML, source="routes.yaml")).tables
    assert tables["orders"].target_file_bytes == 256 * 1024 * 1024 and tables["orders"].max_columns == 100
    assert tables["clicks"].target_file_bytes == 128 * 1024 * 1024 and tables["clicks"].max_columns == 50
    assert tables["orders"].location == "file:///tmp/r/output_uri/orders"
    assert tables["orders"].declared is not None and [f.name for f in tables["orders"].partitions.fields] == ["ts_day"]  # type: ignore[union-attr]
    # a table's partitioning over an undeclared column, a type no one knows, the load history's name
    bad = [
        ({"tables": {"a": {"partition_by": "day(ts)"}}, "routes": [{"table": "a"}]}, "table 'a'.*day\\(ts\\)"),
        ({"tables": {"a": {"columns": {"x": "int32"}}}, "routes": [{"table": "a"}]}, "table 'a'.*int32"),
        ({"tables": {"load_history": {}}, "routes": [{"table": "load_history"}]}, "load history"),
        ({"tables": {"quarantine": {}}, "routes": [{"table": "quarantine"}]}, "quarantine table"),
    ]
    for doc, says in bad:
        with pytest.raises(ConfigError, match=says):
            resolve(s, Routing.model_validate(doc))


def test_routes_leave_the_one_table_settings_alone() -> None:
    from glue_processor.plan.routes import load_routes

    with pytest.raises(ConfigError, match="leave --schema, --partition_by and --expect"):
        load_routes(settings(routes="file:///tmp/r/routes.json", partition_by="day(_event_time)"), read=lambda u: b"")
    with pytest.raises(ConfigError, match="routes needs table_format iceberg"):
        settings(routes="file:///tmp/r/routes.json", table_format="hive-parquet")


def test_a_deployed_routing_file_is_read_from_s3_and_every_failure_is_a_config_error() -> None:
    import boto3
    from moto import mock_aws

    from contracts.routing import read_routing

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="deploy")
        routing = parse_routing(YAML, source="routes.yaml")
        s3.put_object(Bucket="deploy", Key="routes/ok.json", Body=routing.to_json())
        s3.put_object(Bucket="deploy", Key="routes/bad.json", Body=b"{not json")
        # a routing file deploy shipped reads back as the same routing
        assert read_routing(s3, "s3://deploy/routes/ok.json") == routing
        # one that is gone, or that is not a routing, is a ConfigError naming it
        with pytest.raises(ConfigError, match=r"s3://deploy/routes/gone\.json: could not be read \(.*NoSuchKey"):
            read_routing(s3, "s3://deploy/routes/gone.json")
        with pytest.raises(ConfigError, match=r"s3://deploy/routes/bad\.json: not valid JSON"):
            read_routing(s3, "s3://deploy/routes/bad.json")


# -- the job's own folders are no table's name (issue 42, item 6) --------------------------------


def _job_folders() -> set[str]:
    """The folders the job keeps its records in beside its tables, under the output location: each
    path the job's code names as ``.../_<name>/...`` (a new one fails this test until reserved)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "glue_processor"
    found = set()
    for path in root.rglob("*.py"):
        found |= set(re.findall(r"[/\"](_[a-z][a-z_]*)/", path.read_text(encoding="utf-8")))
    return found


def test_the_job_s_own_folders_are_reserved_table_names() -> None:
    from contracts.layout import COMMITS_DIR, STAGING_DIR
    from contracts.routing import RESERVED_TABLE_NAMES
    from glue_processor.commit.deferred import DEFERRED
    from glue_processor.commit.failures import Failures
    from glue_processor.plan.dedupe import SNAPSHOT

    output = "s3://bucket/data"
    # the folders as the job's code builds their paths
    written = {
        COMMITS_DIR,
        STAGING_DIR,
        DEFERRED.split("/")[0],
        SNAPSHOT.split("/")[0],
        Failures(None, output, "q").uri(1).removeprefix(output + "/").split("/")[0],  # type: ignore[arg-type]
        settings(output_uri="file:///tmp/r/out").catalog_uri.split("/out/")[1].split("/")[0],
    }
    assert written <= RESERVED_TABLE_NAMES
    assert _job_folders() <= RESERVED_TABLE_NAMES, _job_folders() - RESERVED_TABLE_NAMES
    assert {"_commits", "_deferred"} <= written


@pytest.mark.parametrize("name", ["_commits", "_deferred", "_staging", "_dedupe", "_failures", "_catalog"])
def test_a_table_named_as_one_of_the_job_s_folders_is_refused_wherever_a_table_is_named(name: str) -> None:
    # a table lives at <output>/<table>: one named as the job's own folder would share it with the
    # job's records (the ledger, the deferred publications, ...); refused with one line naming it
    says = f"'{name}' is the job's own folder under the output location; choose another table name"
    # the routing file (the tables and the routes that name one)
    with pytest.raises(ConfigError, match=says) as raised:
        parse_routing(json.dumps({"tables": {name: {}}, "routes": [{"table": name}]}), source="routes.json")
    assert "\n" not in str(raised.value)
    # the job's one table, and its load history
    with pytest.raises(ConfigError, match=f"--table_name.*{says}"):
        settings(table_name=name)
    with pytest.raises(ConfigError, match=f"--load_history_table.*{says}"):
        settings(load_history_table=name)
    # the stack's TableName parameter, before CloudFormation changes anything
    from infra.build import render

    pattern = render()["Parameters"]["TableName"]["AllowedPattern"]
    assert not re.fullmatch(pattern, name) and not re.fullmatch(pattern, "load_history")
    assert re.fullmatch(pattern, "events") and re.fullmatch(pattern, name + "_x")
    # and a name merely like one stays a table's name
    assert parse_routing(json.dumps({"tables": {f"{name}2": {}}, "routes": [{"table": f"{name}2"}]})).tables
    assert settings(load_history_table="").load_history_table == ""
