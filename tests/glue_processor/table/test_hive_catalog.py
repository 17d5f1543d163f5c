"""hive-parquet: the Glue table's columns follow the keys (moto's Glue)."""

from __future__ import annotations

from typing import Any

import boto3
from moto import mock_aws

from glue_processor.shared.declared import parse_schema
from glue_processor.table.hive_catalog import GlueColumns


def _table(glue: Any) -> dict[str, Any]:
    glue.create_database(DatabaseInput={"Name": "db"})
    glue.create_table(
        DatabaseName="db",
        TableInput={
            "Name": "events",
            "TableType": "EXTERNAL_TABLE",
            "Parameters": {"projection.enabled": "true", "projection.dt.type": "date"},
            "PartitionKeys": [{"Name": "dt", "Type": "string"}],
            "StorageDescriptor": {"Location": "s3://o/data/", "Columns": [{"Name": "_line", "Type": "bigint"}]},
        },
    )
    return dict(glue.get_table(DatabaseName="db", Name="events")["Table"])


@mock_aws
def test_new_keys_become_columns_once_and_the_table_keeps_its_projection() -> None:
    glue = boto3.client("glue", region_name="us-east-1")
    _table(glue)
    sync = GlueColumns(glue, "db", "events", parse_schema('{"columns": {"amount": "decimal(10,2)"}}'))
    # When batches publish with a growing key set
    assert sync.sync(("a", "amount")) == ["a", "amount", "_extra", "_rescued"]
    assert sync.sync(("a", "amount")) == []  # nothing new: no UpdateTable
    assert sync.sync(("a", "amount", "B", "b")) == ["B", "b__2"]
    # Then the table has every column once, typed, and its partition projection is untouched
    table = glue.get_table(DatabaseName="db", Name="events")["Table"]
    columns = [(c["Name"], c["Type"]) for c in table["StorageDescriptor"]["Columns"]]
    assert columns == [
        ("_line", "bigint"),
        ("a", "string"),
        ("amount", "decimal(10,2)"),
        ("_extra", "map<string,string>"),
        ("_rescued", "map<string,string>"),
        ("B", "string"),
        ("b__2", "string"),
    ]
    assert table["Parameters"]["projection.enabled"] == "true"
    assert [p["Name"] for p in table["PartitionKeys"]] == ["dt"]
    versions = glue.get_table_versions(DatabaseName="db", TableName="events")["TableVersions"]
    assert len(versions) == 3  # created, then two updates
