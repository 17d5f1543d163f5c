"""The table's Glue optimizers, as the control plane watches them (boto3 client injected).

A table optimizer that is disabled, or whose last run failed, leaves the table unmaintained: small
files pile up, snapshots and orphans are never removed, and every commit and query slows down. Glue
can stop running an optimizer that keeps failing (a commit conflict it loses, a role it cannot
assume), and nothing else says so; each tick counts those optimizers (``TableOptimizersUnhealthy``,
which alarms) and logs why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.control_plane.exceptions import ControlPlaneError

TYPES = ("compaction", "retention", "orphan_file_deletion")


@dataclass(frozen=True)
class OptimizerHealth:
    type: str
    found: bool
    enabled: bool = False
    last_run: str | None = None  # starting | in_progress | completed | failed
    error: str | None = None

    @property
    def healthy(self) -> bool:
        return self.found and self.enabled and self.last_run != "failed"

    def describe(self) -> str:
        if not self.found:
            return f"{self.type}: not configured"
        if not self.enabled:
            return f"{self.type}: disabled"
        return f"{self.type}: last run failed: {self.error or 'no reason given'}"


class OptimizerWatch:
    def __init__(self, client: Any, catalog_id: str, database: str, table: str) -> None:
        self.client, self.catalog_id, self.database, self.table = client, catalog_id, database, table

    def health(self) -> list[OptimizerHealth]:
        return [self._one(kind) for kind in TYPES]

    def _one(self, kind: str) -> OptimizerHealth:
        try:
            found = self.client.get_table_optimizer(
                CatalogId=self.catalog_id, DatabaseName=self.database, TableName=self.table, Type=kind
            )["TableOptimizer"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "EntityNotFoundException":
                return OptimizerHealth(kind, found=False)
            raise ControlPlaneError(f"get_table_optimizer {kind} of {self.database}.{self.table}: {exc}") from exc
        except BotoCoreError as exc:
            raise ControlPlaneError(f"get_table_optimizer {kind}: {exc}") from exc
        last = found.get("lastRun") or {}
        return OptimizerHealth(
            kind,
            found=True,
            enabled=bool(found.get("configuration", {}).get("enabled")),
            last_run=last.get("eventType"),
            error=last.get("error"),
        )
