"""The tables' Glue optimizers, as the control plane keeps and watches them (boto3 client injected).

A table optimizer that is disabled, or whose last run failed, leaves the table unmaintained: small
files pile up, orphans are never removed, and every commit and query slows down. Glue can stop
running an optimizer that keeps failing (a commit conflict it loses, a role it cannot assume), and
nothing else says so; each tick counts those optimizers (``TableOptimizersUnhealthy``, which alarms)
and logs why. An optimizer Glue would not describe (a read that failed, throttled or denied) counts
too, with why: a watch that cannot see must alarm, never go quiet.

The stack declares the optimizers of its own table (``TableName``). The tables the job creates
itself (each table of the routing file, and the load history) get theirs from the control plane,
once the table exists: compaction, and orphan-file deletion over the table's whole location
(``<output_uri>/<table>``: batches write under ``ingest/``, compaction under ``data/``), with the
role and orphan retention the stack gives; an optimizer whose configuration differs from those
(a changed ``OrphanFileRetentionDays``, a new role) is updated. The job is the one owner of snapshot
expiry (it deletes the files only the snapshots it expires held), so a retention optimizer on one
of the job's tables, which an earlier control plane created, is deleted.

A tick's AWS calls are bounded, however many tables: GetTables pages of 100 until every one of the
job's tables is seen (at most :data:`MAX_TABLE_PAGES`), one ``BatchGetTableOptimizer`` call per
:data:`BATCH` optimizers, and at most :data:`MAX_CHANGES` creates, updates and deletes, creates
first; the rest wait for the next ticks, listed in the tick's response, not counted unhealthy (they
are being kept). A change Glue refuses is counted unhealthy, with why, and tried again next tick. At
100 routed tables: 2 + 16 + 10 = 28 calls, a few seconds of a 60 s Lambda
(tests/lambdas/control_plane/test_optimizers.py counts them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.control_plane.exceptions import ControlPlaneError

WATCHED = ("compaction", "orphan_file_deletion")  # every table keeps these
RETIRED = ("retention",)  # the job expires snapshots: deleted from the job's tables
BATCH = 20  # entries of one BatchGetTableOptimizer call
MAX_CHANGES = 10  # creates, updates and deletes a tick: a few seconds; the rest on the next ticks
TABLES_PAGE = 100  # GetTables' largest MaxResults (Glue API reference, GetTables)
MAX_TABLE_PAGES = 10  # past 1,000 tables in the database, the job's tables not seen are taken as existing
NOT_FOUND = "EntityNotFoundException"
Verb = Literal["create", "update", "delete"]
VERBS: tuple[Verb, ...] = ("create", "update", "delete")  # the order a tick's budget is spent in
DONE = {"create": "created", "update": "updated", "delete": "deleted (the job expires the snapshots)"}


@dataclass(frozen=True)
class OptimizerHealth:
    type: str
    found: bool
    enabled: bool = False
    last_run: str | None = None  # starting | in_progress | completed | failed
    error: str | None = None
    table: str = ""
    unknown: str | None = None  # Glue would not say (access denied, throttled): counted unhealthy, with why
    config: Mapping[str, Any] = field(default_factory=dict)  # the configuration Glue returned

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
    """The optimizers the control plane keeps on a table the job made: their role and settings."""

    role_arn: str
    output_uri: str  # s3://<bucket>/data: a table's files are under <output_uri>/<table>/
    orphan_retention_days: int = 3

    def location(self, table: str) -> str:
        return f"{self.output_uri.rstrip('/')}/{table}"

    def configuration(self, table: str, kind: str, *, enabled: bool = True) -> dict[str, Any]:
        config: dict[str, Any] = {"roleArn": self.role_arn, "enabled": enabled}
        if kind == "orphan_file_deletion":
            config["orphanFileDeletionConfiguration"] = {
                "icebergConfiguration": {
                    "orphanFileRetentionPeriodInDays": self.orphan_retention_days,
                    "location": self.location(table),
                }
            }
        return config

    def differs(self, table: str, kind: str, current: Mapping[str, Any]) -> list[str]:
        """What of ``current`` (a configuration as Glue returns it) is not the stack's."""
        out = [] if current.get("roleArn") == self.role_arn else ["role"]
        if kind == "orphan_file_deletion":
            iceberg = (current.get("orphanFileDeletionConfiguration") or {}).get("icebergConfiguration") or {}
            if iceberg.get("orphanFileRetentionPeriodInDays") != self.orphan_retention_days:
                out.append("orphan retention days")
            if str(iceberg.get("location") or "").rstrip("/") != self.location(table):
                out.append("location")
        return out


@dataclass(frozen=True)
class Change:
    table: str
    type: str
    verb: Verb
    why: str = ""  # an update: what differs


@dataclass(frozen=True)
class WatchReport:
    """A tick's look at the optimizers: each one kept or watched, and what the tick changed."""

    optimizers: tuple[OptimizerHealth, ...]
    done: tuple[str, ...] = ()  # "orders orphan_file_deletion: updated (location)"
    queued: tuple[str, ...] = ()  # the changes left for the next ticks (MAX_CHANGES a tick)

    @property
    def unhealthy(self) -> list[str]:
        return [h.describe() for h in self.optimizers if not h.healthy]


class OptimizerWatch:
    """The optimizers of ``table`` (the stack's) and of ``kept()`` (the tables the job creates,
    whose optimizers ``keeper`` keeps once the table exists)."""

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

    def watch(self) -> WatchReport:
        """Every optimizer of every table, after at most MAX_CHANGES changes toward the stack's settings."""
        problems: list[OptimizerHealth] = []
        try:
            kept = [t for t in dict.fromkeys(self.kept()) if t != self.table]
            kept = self._existing(kept) if kept else []
        except ControlPlaneError as exc:  # counted, with why; the stack's table is still watched
            problems.append(OptimizerHealth("optimizers", found=False, table="(the job's tables)", unknown=str(exc)))
            kept = []
        wanted = [(self.table, k) for k in WATCHED] + [(t, k) for t in kept for k in (*WATCHED, *RETIRED)]
        read = self._read(wanted)
        report: list[OptimizerHealth] = problems
        changes: list[tuple[Change, OptimizerHealth]] = []
        for table, kind in wanted:
            health = read.get((table, kind), OptimizerHealth(kind, found=False, table=table))
            change = self._change(table, kind, health) if table != self.table else None
            if change is not None:
                changes.append((change, health))
            elif kind in WATCHED:
                report.append(health)
        changes.sort(key=lambda c: VERBS.index(c[0].verb))  # stable: a table's order is kept within a verb
        done, queued = [], []
        for i, (change, health) in enumerate(changes):
            name, why = f"{change.table} {change.type}", f" ({change.why})" if change.why else ""
            if i >= MAX_CHANGES:
                queued.append(f"{name}: {change.verb}{why}")
                if change.verb == "update":
                    report.append(health)  # it runs meanwhile, with its settings as they are
                continue
            made, after = self._apply(change, health)
            if made:
                done.append(f"{name}: {DONE[change.verb]}{why}")
            if after is not None:
                report.append(after)
        return WatchReport(tuple(report), tuple(done), tuple(queued))

    def _change(self, table: str, kind: str, health: OptimizerHealth) -> Change | None:
        if self.keeper is None or health.unknown is not None:
            return None
        if kind in RETIRED:
            return Change(table, kind, "delete") if health.found else None
        if not health.found:
            return Change(table, kind, "create")
        differs = self.keeper.differs(table, kind, health.config)
        return Change(table, kind, "update", ", ".join(differs)) if differs else None

    def _existing(self, tables: list[str]) -> list[str]:
        """Those of ``tables`` the job has created (GetTables, names only, until all are seen)."""
        wanted, seen, token = set(tables), set(), None
        for _ in range(MAX_TABLE_PAGES):
            args: dict[str, Any] = {"CatalogId": self.catalog_id, "DatabaseName": self.database}
            args |= {"MaxResults": TABLES_PAGE, "AttributesToGet": ["NAME"]}
            try:
                page = self.client.get_tables(**args, **({"NextToken": token} if token else {}))
            except (ClientError, BotoCoreError) as exc:
                raise ControlPlaneError(f"get_tables of {self.database} failed: {_code(exc)}") from exc
            seen |= {t["Name"] for t in page.get("TableList", [])} & wanted
            token = page.get("NextToken")
            if not token or seen == wanted:
                return [t for t in tables if t in seen]
        return tables  # a database past MAX_TABLE_PAGES pages: a create on a table not there is skipped

    def _read(self, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], OptimizerHealth]:
        out: dict[tuple[str, str], OptimizerHealth] = {}
        for i in range(0, len(wanted), BATCH):
            chunk = wanted[i : i + BATCH]
            entries = [
                {"catalogId": self.catalog_id, "databaseName": self.database, "tableName": t, "type": kind}
                for t, kind in chunk
            ]
            try:
                response = self.client.batch_get_table_optimizer(Entries=entries)
            except (ClientError, BotoCoreError) as exc:  # these optimizers unknown, the other batches still read
                why = f"read failed: {_code(exc)}"
                out |= {(t, kind): OptimizerHealth(kind, found=False, table=t, unknown=why) for t, kind in chunk}
                continue
            for item in response.get("TableOptimizers", []):
                optimizer = item.get("tableOptimizer") or {}
                last = optimizer.get("lastRun") or {}
                config = optimizer.get("configuration") or {}
                kind = optimizer.get("type", "")
                out[item["tableName"], kind] = OptimizerHealth(
                    kind,
                    found=True,
                    enabled=bool(config.get("enabled")),
                    last_run=last.get("eventType"),
                    error=last.get("error"),
                    table=item["tableName"],
                    config=config,
                )
            for failure in response.get("Failures", []):
                code = (failure.get("error") or {}).get("ErrorCode", "")
                if code != NOT_FOUND:  # one table's trouble: that optimizer is reported, the others still are
                    kind, table = failure.get("type", ""), failure.get("tableName", "")
                    out[table, kind] = OptimizerHealth(kind, found=False, table=table, unknown=code or "no reason")
        return out

    def _apply(self, change: Change, health: OptimizerHealth) -> tuple[bool, OptimizerHealth | None]:
        """Make ``change``: whether it was made, and the optimizer's health after it (None: nothing
        left to watch)."""
        assert self.keeper is not None
        where = {
            "CatalogId": self.catalog_id,
            "DatabaseName": self.database,
            "TableName": change.table,
            "Type": change.type,
        }
        try:
            if change.verb == "create":
                config = self.keeper.configuration(change.table, change.type)
                self.client.create_table_optimizer(**where, TableOptimizerConfiguration=config)
                return True, OptimizerHealth(change.type, found=True, enabled=True, table=change.table, config=config)
            if change.verb == "update":  # an operator's disable stays: only the stack's settings change
                config = self.keeper.configuration(change.table, change.type, enabled=health.enabled)
                self.client.update_table_optimizer(**where, TableOptimizerConfiguration=config)
                return True, health
            self.client.delete_table_optimizer(**where)
            return True, None
        except (ClientError, BotoCoreError) as exc:
            code = _code(exc)
            if code == NOT_FOUND:  # the table (create, update) or the optimizer (delete) went: nothing to keep
                return False, None
            if code == "AlreadyExistsException":  # another tick created it since this one read
                return False, OptimizerHealth(change.type, found=True, enabled=True, table=change.table)
            failed = f"could not be {DONE[change.verb].split(' ')[0]}" + (f" ({change.why})" if change.why else "")
            return False, OptimizerHealth(
                change.type, found=health.found, table=change.table, unknown=f"{failed}: {code}"
            )


def _code(exc: ClientError | BotoCoreError) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or exc)
    return f"{type(exc).__name__}: {exc}"
