"""The Iceberg catalog and the table: the Glue Data Catalog on AWS, an embedded SQLite catalog locally.

The same code runs on both; only :func:`open_catalog` differs. :func:`ensure_table` creates the table
on first use, or adopts one created elsewhere (the stack declares it): it adds the lineage columns and
the partition spec if they are missing, and the name mapping readers need for files written without
Iceberg field ids.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, ResolveError, TableAlreadyExistsError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.schema import Schema, promote
from pyiceberg.table import Table, TableProperties
from pyiceberg.types import IcebergType

from contracts.exceptions import ConfigError
from glue_processor.shared.partitioning import PartitionPlan, parse_partition_by
from glue_processor.table.schema import LINEAGE_TYPES, initial_schema, same_spec, spec_fields

logger = logging.getLogger(__name__)

# Every table property the job sets, and why.
TABLE_PROPERTIES = {
    "format-version": "2",
    # metadata.json is rewritten on every commit: keep a bounded number of old ones
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
    # `make compact`'s snapshot expiry (local); the job expires at --snapshot_retention_hours itself
    "history.expire.max-snapshot-age-ms": str(24 * 3600 * 1000),
    "history.expire.min-snapshots-to-keep": "10",
    "write.parquet.compression-codec": "snappy",
    # every append adds a manifest: the job's appends merge the small ones once there are 24, into
    # manifests of at most 512 kB (Iceberg configuration: commit.manifest.*), so the manifests each
    # commit lists and each query plans with are bounded by the table's live files, not its history
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "24",
    "commit.manifest.target-size-bytes": str(512 * 1024),
    # commits conflict with the Glue table optimizers' (optimistic concurrency both sides): retried with
    # exponential back-off, by pyiceberg for the job and by Iceberg's Java library for the optimizers
    # (Iceberg configuration: commit.retry.*); the job retries past these too (glue_processor/commit/publication.py)
    "commit.retry.num-retries": "10",
    "commit.retry.min-wait-ms": "100",
    "commit.retry.max-wait-ms": "60000",
    "commit.retry.total-timeout-ms": "1800000",
    "ingest.writer": "s3-ndjson-ingest",
}


def open_catalog(uri: str, *, glue_client: Any = None, properties: dict[str, str] | None = None) -> Catalog:
    """``glue`` or ``sqlite:///<path>`` (see :attr:`JobSettings.catalog_uri`)."""
    props = dict(properties or {})
    if uri == "glue":
        from pyiceberg.catalog.glue import GlueCatalog

        return GlueCatalog("glue", client=glue_client, **props)
    if uri.startswith("sqlite:///"):
        from pyiceberg.catalog.sql import SqlCatalog

        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        return SqlCatalog("local", uri=uri, **props)
    raise ValueError(f"unknown catalog {uri!r}: expected glue or sqlite:///<path>")


def ensure_table(
    catalog: Catalog,
    database: str,
    name: str,
    *,
    location: str,
    plan: PartitionPlan | None = None,
    columns: pa.Schema | None = None,
) -> Table:
    """Load the table, creating it (and its database) on first use; adopt one made elsewhere.
    ``columns``: typed columns it must have (declared ones, and the partition sources); ``plan``:
    its partitioning (default: the ingest day)."""
    identifier = (database, name)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        with contextlib.suppress(NamespaceAlreadyExistsError):
            catalog.create_namespace(database)
        schema = initial_schema()
        try:
            table = catalog.create_table(
                identifier,
                schema=schema,
                location=location,
                properties={
                    **TABLE_PROPERTIES,
                    TableProperties.DEFAULT_NAME_MAPPING: schema.name_mapping.model_dump_json(),
                },
            )
            logger.info("created the Iceberg table", extra={"table": f"{database}.{name}", "location": location})
        except TableAlreadyExistsError:  # another run created it first
            table = catalog.load_table(identifier)
    return _adopt(table, plan or parse_partition_by("", None), columns)


def check_declared(catalog: Catalog, database: str, name: str, columns: pa.Schema) -> None:
    """Raise :class:`ConfigError` when the table exists and a declared type does not fit its column
    (what the job checks at start-up, for a tool to check before anything runs)."""
    try:
        table = catalog.load_table((database, name))
    except NoSuchTableError:
        return
    _retyped(table, [f for f in columns if f.name in {x.name for x in table.schema().fields}])


def _retyped(table: Table, declared: list[pa.Field]) -> dict[str, IcebergType]:
    """The columns of the table a declared type widens (column -> its new type). A declared type a
    column cannot take stops the job at start-up, in one line: Iceberg changes a column's type in
    place only to widen it (int to long, float to double, a decimal's precision), so every file
    written with another would be refused at publication."""
    if not declared:
        return {}
    schema = table.schema()
    present = Schema(*(schema.find_field(f.name) for f in declared))
    wanted = pyarrow_to_schema(pa.schema(declared), name_mapping=present.name_mapping)
    widen, clashes = {}, []
    for field in present.fields:
        want = wanted.find_field(field.field_id).field_type
        if want == field.field_type:
            continue
        try:
            promote(field.field_type, want)
        except ResolveError:
            clashes.append(f"{field.name}: {want} declared, {field.field_type} in the table")
            continue
        widen[field.name] = want
    if clashes:
        raise ConfigError(
            f"table {'.'.join(table.name())}: the declared types do not fit its columns ({'; '.join(clashes)}): a "
            "column's type changes in place only to widen it (int to long, float to double); declare these columns "
            "as the table has them, or load the typed data into a table of its own (a new WORKDIR, or a routed table)"
        )
    return widen


def _adopt(table: Table, plan: PartitionPlan, columns: pa.Schema | None) -> Table:
    """Bring a table (new, or one the stack declared) to what the job writes: the lineage and
    declared columns, the partitioning, the name mapping. A table whose partitioning differs from
    ``plan`` has its spec evolved in place (Iceberg partition evolution: its files keep the spec they
    were written with, new ones take the new spec, and readers plan over both); nothing is rewritten."""
    schema = table.schema()
    have = {f.name for f in schema.fields}
    widen = _retyped(table, [f for f in (columns or pa.schema([])) if f.name in have])
    missing = [n for n in LINEAGE_TYPES if n not in have]
    typed = [f for f in (columns or pa.schema([])) if f.name not in have]
    needs_spec = not same_spec(table.spec(), schema, plan)
    if needs_spec and table.metadata.snapshots:
        logger.warning(
            "evolving the table's partition spec in place: files written before keep their partitioning",
            extra={"table": str(table.name()), "from": str(table.spec()), "to": [f.name for f in plan.fields]},
        )
    needs_mapping = table.metadata.name_mapping() is None
    wanted = {k: v for k, v in TABLE_PROPERTIES.items() if k != "format-version" and table.properties.get(k) != v}
    if not (missing or typed or widen or needs_spec or needs_mapping or wanted):
        return table
    with table.transaction() as tx:
        if missing or typed or widen:
            with tx.update_schema() as update:
                for name in missing:
                    update.add_column(name, LINEAGE_TYPES[name])
                if typed:
                    update.union_by_name(pa.schema(typed))
                for name, kind in widen.items():
                    update.update_column(name, field_type=kind)
        if needs_mapping:
            tx.set_properties(
                {TableProperties.DEFAULT_NAME_MAPPING: tx.table_metadata.schema().name_mapping.model_dump_json()}
            )
        if needs_spec:
            with tx.update_spec() as spec:
                for field in table.spec().fields:
                    spec.remove_field(field.name)
                for source, transform, field_name in spec_fields(plan):
                    spec.add_field(source, transform, field_name)
        if wanted:
            tx.set_properties(wanted)
    logger.info("adopted the Iceberg table", extra={"table": str(table.name()), "added_columns": missing})
    return table
