"""The routing file: which table each landed object goes to, and how each table is written.

One file (YAML or JSON) maps object keys to tables; ``make deploy ROUTES=<file>`` validates it and
ships it to S3 as JSON (the job's ``--routes``), ``make run ROUTES=<file>`` reads it locally, and
the control plane reads the same object to keep each table's optimizers. Without a routing file
the job writes one table (``--table_name``), as if every key matched one route to it::

    tables:
      orders:                          # a table of the job's database, created on first use
        columns: {amount: "decimal(12,2)", ts: timestamp}   # declared types (as a --schema file's)
        partition_by: day(ts)          # Iceberg transforms over the record (as --partition_by)
        target_file_mb: 256            # default: the job's --target_file_mb
        max_columns: 200               # default: the job's --max_columns
        expect:                        # rules each record must keep (glue_processor/shared/rules.py)
          positive_amount: "amount > 0"                                     # on_fail: quarantine
          known_country: {sql: "country IN ('DE', 'US')", on_fail: drop}    # or warn
      clicks: {}
    routes:                            # first match wins
      - {prefix: incoming/orders/, table: orders}
      - {prefix: incoming/clicks/, glob: "*.ndjson.gz", table: clicks}
    unmatched: ignore                  # or a table name: where keys no route matches go

A route matches a key that starts with ``prefix`` and, when ``glob`` is given, whose whole key
matches it (``fnmatch`` rules: ``*`` and ``?`` match any character, ``/`` included; ``[...]`` a
set). Objects no route matches go to the ``unmatched`` table, or are *ignored*: not read, counted
(``UnroutedObjects``) and listed in the load history with status ``ignored`` (a later routing
file and ``make reconcile REQUEUE=1`` can load them).

Bounds, each a cost the job pays per batch: at most :data:`MAX_TABLES` tables (a batch commits
every table it touches, one Iceberg commit each) and :data:`MAX_ROUTES` routes (every key is
matched against one compiled expression, linear in the key's length, at most 1,024 bytes on S3).
"""

from __future__ import annotations

import fnmatch
import json
import re
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from contracts.column_names import MAX_DATA_COLUMNS
from contracts.exceptions import ConfigError
from contracts.layout import COMMITS_DIR, STAGING_DIR
from contracts.validation import describe

MAX_TABLES = 100
MAX_ROUTES = 1000
IGNORE = "ignore"
# The directories the job keeps its own records in, beside its tables' (<output>/<table>): the
# commit ledger and staged attempts (contracts.layout), deferred publications, the dedupe index,
# failed-attempt counts, the local catalog. A table of one of these names would share its files.
RESERVED_TABLE_NAMES = frozenset({COMMITS_DIR, STAGING_DIR, "_deferred", "_dedupe", "_failures", "_catalog", "_index"})


def not_reserved(name: str) -> str:
    """``name``, unless it is one of :data:`RESERVED_TABLE_NAMES` (a ValueError: pydantic reports it)."""
    if name in RESERVED_TABLE_NAMES:
        raise ValueError(f"{name!r} is the job's own folder under the output location; choose another table name")
    return name


# Glue table names as Athena can query them unquoted (the job's --table_name is one), none of them
# one of the job's own folders
TABLE_NAME_PATTERN = r"^[a-z0-9_]{1,255}$"
TableName = Annotated[str, StringConstraints(pattern=TABLE_NAME_PATTERN), AfterValidator(not_reserved)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ColumnType(_Frozen):
    type: str
    format: str = "iso8601"


# What a table does when the bucket changes under it (docs/mirror.md): a new version of a key it
# loaded replaces that version's rows in the same commit (replace), or, when it only adds lines to
# the end, loads those lines alone (tail), or is loaded in full beside the old (append).
OnOverwrite = Literal["replace", "tail", "append"]
# A deleted key: its rows stay (keep) or go in the next batch (retract).
OnDelete = Literal["keep", "retract"]
# What becomes of a landing object once the commit that loaded it is published.
AfterLoad = Literal["keep", "archive", "delete"]
# What a record that breaks a rule becomes: a row of the quarantine table, nothing, or a row kept.
OnFail = Literal["quarantine", "drop", "warn"]
MAX_RULES = 32  # a table's rules: each costs the parse tasks a pass over the columns it reads
RULE_NAME_PATTERN = r"^[A-Za-z0-9_]{1,64}$"  # a metric dimension and a column value each
RuleName = Annotated[str, StringConstraints(pattern=RULE_NAME_PATTERN)]


class Expectation(_Frozen):
    """A rule the table's records must keep: a boolean SQL expression over a record's columns."""

    sql: str = Field(min_length=1, max_length=4096)
    on_fail: OnFail = "quarantine"


Expect = dict[RuleName, Annotated[str, StringConstraints(min_length=1, max_length=4096)] | Expectation]
_EXPECT = TypeAdapter(Annotated[Expect, Field(max_length=MAX_RULES)])


class TableSpec(_Frozen):
    """How one table is written (what is not set takes the job's own setting)."""

    columns: dict[str, str | ColumnType] = Field(
        default_factory=dict, description="declared column types, as the columns of a --schema file"
    )
    partition_by: str = Field(default="", description="Iceberg partitioning, as --partition_by")
    target_file_mb: int | None = Field(default=None, ge=1, le=2048, description="Parquet file size target")
    max_columns: int | None = Field(default=None, ge=1, le=MAX_DATA_COLUMNS, description="column bound")
    on_overwrite: OnOverwrite | None = Field(
        default=None, description="a new version of a loaded key, as --on_overwrite"
    )
    on_delete: OnDelete | None = Field(default=None, description="a deleted key, as --on_delete")
    after_load: AfterLoad | None = Field(default=None, description="a loaded landing object, as --after_load")
    expect: Expect = Field(
        default_factory=dict,
        max_length=MAX_RULES,
        description="rules each record must keep: name -> SQL, or name -> {sql, on_fail: quarantine|drop|warn}",
    )

    def schema_document(self) -> bytes | None:
        """The declared columns as a --schema file (None: every column a string)."""
        if not self.columns:
            return None
        columns = {k: v if isinstance(v, str) else v.model_dump() for k, v in self.columns.items()}
        return json.dumps({"columns": columns}, sort_keys=True).encode()


class Route(_Frozen):
    table: TableName
    prefix: str = Field(default="", max_length=1024)
    glob: str | None = Field(default=None, min_length=1, max_length=1024)

    def pattern(self) -> str:
        """This route as a regular expression over the whole key."""
        head = re.escape(self.prefix)
        if self.glob is None:
            return f"{head}.*"
        # both must hold: the prefix (a lookahead) and the glob over the whole key
        return f"(?={head})" + fnmatch.translate(self.glob).removeprefix("(?s:").removesuffix(")\\Z")


class Routing(_Frozen):
    """The validated routing file."""

    version: Literal[1] = 1
    tables: dict[TableName, TableSpec] = Field(min_length=1, max_length=MAX_TABLES)
    routes: list[Route] = Field(min_length=1, max_length=MAX_ROUTES)
    unmatched: str = Field(default=IGNORE, description="'ignore', or the table that takes keys no route matches")

    @model_validator(mode="after")
    def _consistent(self) -> Routing:
        unknown = sorted({r.table for r in self.routes} - set(self.tables))
        if unknown:
            raise ValueError(f"routes name tables that 'tables' does not declare: {unknown}")
        if self.unmatched != IGNORE and self.unmatched not in self.tables:
            raise ValueError(f"unmatched is {self.unmatched!r}: expected 'ignore' or a table of 'tables'")
        unused = sorted(set(self.tables) - {r.table for r in self.routes} - {self.unmatched})
        if unused:
            raise ValueError(f"tables no route and not 'unmatched' leads to (a typo?): {unused}")
        return self

    @cached_property
    def _matcher(self) -> re.Pattern[str]:
        # one expression, alternatives in route order: the first route that matches the whole key wins
        alternatives = "|".join(f"(?P<r{i}>{r.pattern()})" for i, r in enumerate(self.routes))
        return re.compile(f"(?s:{alternatives})\\Z")

    def table_of(self, key: str) -> str | None:
        """The table an object key goes to; None: it is ignored."""
        m = self._matcher.match(key)
        if m is None or m.lastgroup is None:
            return None if self.unmatched == IGNORE else self.unmatched
        return self.routes[int(m.lastgroup[1:])].table

    def to_json(self) -> bytes:
        """The canonical form shipped to S3 (what the job reads)."""
        return self.model_dump_json(exclude_defaults=False, indent=1).encode()

    @classmethod
    def single(cls, table: str) -> Routing:
        """The routing of a job without a routing file: every key to one table."""
        return cls(tables={table: TableSpec()}, routes=[Route(table=table)])


def parse_routing(text: str | bytes, *, source: str = "routing file") -> Routing:
    """A routing file's text (JSON, or YAML when ``source`` ends in .yaml/.yml), validated; a
    :class:`ConfigError` names each problem and where it is."""
    doc: Any
    if source.lower().endswith((".yaml", ".yml")):
        import yaml  # the deploy and local tools have it; the job reads the JSON that deploy ships

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML ({exc})") from exc
    else:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{source}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping with 'tables' and 'routes'")
    try:
        return Routing.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {describe(exc, root='routing')}") from exc


def parse_expect(text: str | bytes, *, source: str = "--expect") -> Expect:
    """A rules file (``--expect``: the ``expect:`` mapping of a routing file's table, as JSON),
    validated; a :class:`ConfigError` names what is wrong."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{source}: not valid JSON ({exc})") from exc
    try:
        return _EXPECT.validate_python(doc)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {describe(exc, root='expect')}") from exc


def read_routing(s3: Any, uri: str) -> Routing:
    """The routing file at ``s3://bucket/key`` (a deployed ``RoutesUri``), read with a boto3 S3 client
    and validated; a :class:`ConfigError` when it cannot be read or is not a routing."""
    from botocore.exceptions import BotoCoreError, ClientError  # where an S3 client is, botocore is

    bucket, _, key = uri.removeprefix("s3://").partition("/")
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except (ClientError, BotoCoreError) as exc:
        raise ConfigError(f"{uri}: could not be read ({exc})") from exc
    return parse_routing(body, source=uri)
