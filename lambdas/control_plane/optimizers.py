"""The tables' Glue optimizers, as the control plane keeps and watches them (boto3 client injected).

A table optimizer that is disabled, or whose last run failed, leaves the table unmaintained: small
files pile up, snapshots and orphans are never removed, and every commit and query slows down. Glue
can stop running an optimizer that keeps failing (a commit conflict it loses, a role it cannot
assume), and nothing else says so; each tick counts those optimizers (``TableOptimizersUnhealthy``,
which alarms) and logs why.

The stack declares the optimizers of its own table (``TableName``). The tables the job creates
itself (each table of the routing file, and the load history) get theirs from the control plane:
a table that exists with an optimizer missing gets it created (compaction; snapshot retention;
orphan-file deletion on ``data/`` only, where compaction writes), with the role and retention the
stack gives. The watch reads every table's optimizers in batches of :data:`BATCH` (one
``BatchGetTableOptimizer`` call each), so a tick costs a few calls however many tables there are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.control_plane.exceptions import ControlPlaneError

TYPES = ("compaction", "retention", "orphan_file_deletion")
BATCH = 20  # entries of one BatchGetTableOptimizer call
NOT_FOUND = "EntityNotFoundException"


@dataclass(frozen=True)
class OptimizerHealth:
    type: str
    found: bool
    enabled: bool = False
    last_run: str | None = None  # starting | in_progress | completed | failed
    error: str | None = None
    table: str = ""
    unknown: str | None = None  # Glue would not say (access denied, throttled): counted unhealthy, with why

    @property
    def healthy(self) -> bool:
        return self.unknown is None and self.found and self.enabled and self.last_run != "failed"

    def describe(self) -> str:
        where = f"{self.table} " if self.table else ""
        if self.unknown is not None:
            return f"{where}{self.type}: unknown ({self.unknown})"
        if not self.found:
            return f"{where}{self.type}: not configured"
        if not self.enabled:
            return f"{where}{self.type}: disabled"
        return f"{where}{self.type}: last run failed: {self.error or 'no reason given'}"


@dataclass(frozen=True)
class Keeper:
    """How the control plane creates a missing optimizer of a table the job made."""

    role_arn: str
    output_uri: str  # s3://<bucket>/data: a table's files are under <output_uri>/<table>/
    snapshot_retention_days: int = 1
    orphan_retention_days: int = 3

    def configuration(self, table: str, kind: str) -> dict[str, Any]:
        config: dict[str, Any] = {"roleArn": self.role_arn, "enabled": True}
        if kind == "retention":
            config["retentionConfiguration"] = {
                "icebergConfiguration": {
                    "snapshotRetentionPeriodInDays": self.snapshot_retention_days,
                    "numberOfSnapshotsToRetain": 10,
                    "cleanExpiredFiles": True,
                }
            }
        elif kind == "orphan_file_deletion":
            # data/ only, where compaction writes: batches write under ingest/, and a batch committed but
            # not yet appended must keep its files however long the job is down
            config["orphanFileDeletionConfiguration"] = {
                "icebergConfiguration": {
                    "orphanFileRetentionPeriodInDays": self.orphan_retention_days,
                    "location": f"{self.output_uri.rstrip('/')}/{table}/data",
                }
            }
        return config


class OptimizerWatch:
    """The optimizers of ``table`` (the stack's) and of ``kept()`` (the tables the job creates,
    whose missing optimizers ``keeper`` creates once the table exists)."""

    def __init__(
        self,
        client: Any,
        catalog_id: str,
        database: str,
        table: str,
        *,
        kept: Callable[[], Sequence[str]] = tuple,
        keeper: Keeper | None = None,
    ) -> None:
        self.client, self.catalog_id, self.database, self.table = client, catalog_id, database, table
        self.kept, self.keeper = kept, keeper

    def health(self) -> list[OptimizerHealth]:
        """Every optimizer of every table (a table the job made that does not exist yet: none)."""
        kept = [t for t in dict.fromkeys(self.kept()) if t != self.table]
        tables = [self.table, *kept]
        found = self._read([(t, kind) for t in tables for kind in TYPES])
        out = []
        for t in tables:
            for kind in TYPES:
                health = found.get((t, kind), OptimizerHealth(kind, found=False, table=t))
                if not health.found and t in kept and self.keeper is not None:
                    created = self._create(t, kind)
                    if created is None:  # the job has not made the table yet: nothing to maintain
                        continue
                    health = created
                out.append(health)
        return out

    def _read(self, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], OptimizerHealth]:
        out: dict[tuple[str, str], OptimizerHealth] = {}
        for i in range(0, len(wanted), BATCH):
            entries = [
                {"catalogId": self.catalog_id, "databaseName": self.database, "tableName": t, "type": kind}
                for t, kind in wanted[i : i + BATCH]
            ]
            try:
                response = self.client.batch_get_table_optimizer(Entries=entries)
            except (ClientError, BotoCoreError) as exc:
                raise ControlPlaneError(f"batch_get_table_optimizer of {self.database}: {exc}") from exc
            for item in response.get("TableOptimizers", []):
                optimizer = item.get("tableOptimizer") or {}
                last = optimizer.get("lastRun") or {}
                kind = optimizer.get("type", "")
                out[item["tableName"], kind] = OptimizerHealth(
                    kind,
                    found=True,
                    enabled=bool(optimizer.get("configuration", {}).get("enabled")),
                    last_run=last.get("eventType"),
                    error=last.get("error"),
                    table=item["tableName"],
                )
            for failure in response.get("Failures", []):
                code = (failure.get("error") or {}).get("ErrorCode", "")
                if code != NOT_FOUND:  # one table's trouble: that optimizer is reported, the others still are
                    kind, table = failure.get("type", ""), failure.get("tableName", "")
                    out[table, kind] = OptimizerHealth(kind, found=False, table=table, unknown=code or "no reason")
        return out

    def _create(self, table: str, kind: str) -> OptimizerHealth | None:
        """Create a missing optimizer of a table the job made; None while the table does not exist."""
        assert self.keeper is not None
        try:
            self.client.create_table_optimizer(
                CatalogId=self.catalog_id,
                DatabaseName=self.database,
                TableName=table,
                Type=kind,
                TableOptimizerConfiguration=self.keeper.configuration(table, kind),
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == NOT_FOUND:  # the job has not created the table yet: next tick
                return None
            if code == "AlreadyExistsException":
                return OptimizerHealth(kind, found=True, enabled=True, table=table)
            return OptimizerHealth(kind, found=False, table=table, unknown=f"could not be created: {code}")
        except BotoCoreError as exc:
            return OptimizerHealth(kind, found=False, table=table, unknown=f"could not be created: {exc}")
        return OptimizerHealth(kind, found=True, enabled=True, table=table)
