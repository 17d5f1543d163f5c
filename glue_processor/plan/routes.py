"""The tables a job writes and how each object finds its table (the routing file, resolved).

Without ``--routes`` the job writes one table, ``--table_name``, with ``--schema`` and
``--partition_by``: the routing of one route that every key matches. With a routing file
(:mod:`contracts.routing`), each table has its own declared columns, partitioning, file size target
and column bound; the job's ``--target_file_mb`` and ``--max_columns`` fill what a table leaves
unset. Everything is checked at start-up, so a bad routing file stops the job naming the table (and a
rule that cannot work, naming the rule: glue_processor/shared/rules.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contracts.exceptions import ConfigError
from contracts.routing import AfterLoad, OnDelete, OnOverwrite, Routing, parse_expect, parse_routing
from glue_processor.settings import MIB, JobSettings
from glue_processor.shared.declared import DeclaredSchema, parse_schema
from glue_processor.shared.partitioning import PartitionPlan, parse_partition_by
from glue_processor.shared.rules import Rules, compile_rules, rule_specs


@dataclass(frozen=True)
class TableConfig:
    """One table the job writes, as its batches need it."""

    name: str
    location: str
    declared: DeclaredSchema | None
    partitions: PartitionPlan | None  # None: hive-parquet (dt= directories)
    target_file_bytes: int
    max_columns: int
    on_overwrite: OnOverwrite = "append"
    on_delete: OnDelete = "keep"
    after_load: AfterLoad = "keep"
    rules: Rules | None = None  # what each record must keep (None: no rules)

    @property
    def mirrors(self) -> bool:
        """The table keeps each key's loaded version (docs/mirror.md): a later version or a delete
        of the key changes its rows."""
        return self.on_overwrite != "append" or self.on_delete == "retract"


@dataclass(frozen=True)
class Routes:
    routing: Routing
    tables: dict[str, TableConfig]
    # the table of a version 1 commit record's share "" (written by a one-table job)
    legacy: str

    def table_of(self, key: str) -> str | None:
        """The table an object key goes to (None: ignored)."""
        return self.routing.table_of(key)

    def name(self, share_table: str) -> str:
        """A share's table, a version 1 record's ("") included."""
        return share_table or self.legacy


def load_routes(settings: JobSettings, read: Callable[[str], bytes] | None = None) -> Routes:
    """The job's tables: from ``--routes`` (read through ``read``: S3 or a local file), or the one
    table of ``--table_name``, ``--schema`` and ``--partition_by``."""
    if not settings.routes_uri:
        declared = _read_schema(settings.schema_uri, read) if settings.schema_uri else None
        rules = None
        if settings.expect_uri:
            where = f"--expect {settings.expect_uri}"
            expect = parse_expect((read or _read)(settings.expect_uri), source=where)
            rules = compile_rules(rule_specs(expect), declared, where=f"{where}: table {settings.table_name!r}")
        config = TableConfig(
            name=settings.table_name,
            location=settings.table_location,
            declared=declared,
            partitions=parse_partition_by(settings.partition_by, declared)
            if settings.table_format == "iceberg"
            else None,
            target_file_bytes=settings.target_file_bytes,
            max_columns=settings.max_columns,
            on_overwrite=settings.overwrite_mode,
            on_delete=settings.on_delete,
            after_load=settings.after_load,
            rules=rules,
        )
        return Routes(Routing.single(settings.table_name), {config.name: config}, legacy=settings.table_name)
    if settings.schema_uri or settings.partition_by or settings.expect_uri:
        raise ConfigError(
            "--routes names each table's columns, partitioning and rules: leave --schema, --partition_by and --expect"
        )
    source = f"--routes {settings.routes_uri}"
    text = (read or _read)(settings.routes_uri)
    return resolve(settings, parse_routing(text, source=source), source=source)


def resolve(settings: JobSettings, routing: Routing, *, source: str = "--routes") -> Routes:
    """Each table of ``routing`` as the job writes it; a :class:`ConfigError` names a table whose
    columns, partitioning or name cannot be."""
    tables: dict[str, TableConfig] = {}
    for name, spec in routing.tables.items():
        where = f"{source}: table {name!r}"
        if name == settings.load_history_table:
            raise ConfigError(f"{where}: the load history's name (--load_history_table); choose another")
        if name == settings.quarantine_table:
            raise ConfigError(f"{where}: the quarantine table's name (--quarantine_table); choose another")
        document = spec.schema_document()
        declared = parse_schema(document, source=f"{where} columns") if document else None
        try:
            partitions = parse_partition_by(spec.partition_by, declared)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        rules = compile_rules(rule_specs(spec.expect), declared, where=where)
        tables[name] = TableConfig(
            name=name,
            location=settings.location_of(name),
            declared=declared,
            partitions=partitions,
            target_file_bytes=(spec.target_file_mb or settings.target_file_mb) * MIB,
            max_columns=spec.max_columns or settings.max_columns,
            on_overwrite=spec.on_overwrite or settings.overwrite_mode,
            on_delete=spec.on_delete or settings.on_delete,
            after_load=spec.after_load or settings.after_load,
            rules=rules,
        )
    return Routes(routing, tables, legacy=settings.table_name)


def _read_schema(uri: str, read: Callable[[str], bytes] | None) -> DeclaredSchema:
    return parse_schema((read or _read)(uri), source=f"--schema {uri}")


def _read(uri: str) -> bytes:
    from glue_processor.shared.objects import store_for

    return store_for(uri).read(uri).data
