"""The hive-parquet mode's Glue table: its columns follow the keys the job has seen.

The stack declares the table (partition projection over ``dt``, the lineage columns); each new key
becomes a column through ``glue:UpdateTable`` after the batch that found it is published, so Athena
sees a key as soon as there is data for it. Columns are only added, never removed or retyped.
"""

from __future__ import annotations

import logging
from typing import Any

from glue_processor.commit.publication import refuse_columns
from glue_processor.shared.declared import RESCUED, DeclaredSchema
from glue_processor.shared.extra import EXTRA
from glue_processor.shared.names import column_names

logger = logging.getLogger(__name__)

# Hive type names of the declared types (Athena DDL)
HIVE_TYPES = {"string": "string", "bigint": "bigint", "double": "double", "boolean": "boolean", "date": "date"}
# what UpdateTable's TableInput accepts of what GetTable returns
TABLE_INPUT_KEYS = (
    "Name",
    "Description",
    "Owner",
    "Retention",
    "StorageDescriptor",
    "PartitionKeys",
    "TableType",
    "Parameters",
    "TargetTable",
)


def hive_type(key: str, declared: DeclaredSchema | None) -> str:
    column = declared.get(key) if declared is not None else None
    if column is None:
        return "string"
    if column.type.startswith("decimal"):
        return column.type.replace(" ", "")
    return HIVE_TYPES.get(column.type, "timestamp")


class GlueColumns:
    """Adds the columns of new keys to the Glue table (one GetTable per process, UpdateTable on change)."""

    def __init__(self, glue: Any, database: str, table: str, declared: DeclaredSchema | None = None) -> None:
        self.glue = glue
        self.database = database
        self.table = table
        self.declared = declared
        self._known: set[str] | None = None

    def wanted(self, keys: tuple[str, ...]) -> list[tuple[str, str]]:
        """The (name, Hive type) of every column the keys need."""
        wanted = [(name, hive_type(key, self.declared)) for key, name in column_names(keys)]
        wanted.append((EXTRA, "map<string,string>"))
        if self.declared is not None:
            wanted.append((RESCUED, "map<string,string>"))
        return wanted

    def check(self, keys: tuple[str, ...]) -> None:
        """Refuse a column set Glue would refuse (names, width): before the batch's commit record."""
        refuse_columns([name for name, _ in self.wanted(keys)])

    def sync(self, keys: tuple[str, ...]) -> list[str]:
        """Add the columns ``keys`` need that the table lacks; the names added."""
        wanted = self.wanted(keys)
        if self._known is not None and all(name in self._known for name, _ in wanted):
            return []
        current = self.glue.get_table(DatabaseName=self.database, Name=self.table)["Table"]
        columns = list(current.get("StorageDescriptor", {}).get("Columns", []))
        have = {c["Name"].lower() for c in columns} | {p["Name"].lower() for p in current.get("PartitionKeys", [])}
        added = [(n, t) for n, t in wanted if n.lower() not in have]
        if added:
            table_input = {k: current[k] for k in TABLE_INPUT_KEYS if k in current}
            table_input["StorageDescriptor"] = {
                **current["StorageDescriptor"],
                "Columns": columns + [{"Name": n, "Type": t} for n, t in added],
            }
            self.glue.update_table(DatabaseName=self.database, TableInput=table_input)
            logger.info(
                "added columns to the Glue table", extra={"table": self.table, "columns": [n for n, _ in added]}
            )
        self._known = have | {n.lower() for n, _ in wanted}
        return [n for n, _ in added]
