"""Rules a table's records must keep: named boolean SQL expressions, evaluated on Arrow in the parse tasks.

A table's rules come from the routing file (``expect:``) or, for the one table of a job without one,
from ``--expect`` (a JSON file of the same mapping)::

    expect:
      positive_amount: "amount > 0"                      # on_fail: quarantine (the default)
      known_country: {sql: "country IN ('DE', 'US')", on_fail: drop}
      recent: {sql: "ts >= TIMESTAMP '2020-01-01 00:00:00'", on_fail: warn}

A record keeps a rule when the expression is TRUE; FALSE or NULL (a value it needs is missing) is a
violation (write ``amount IS NULL OR amount > 0`` to let a missing value through). ``on_fail``:
``quarantine`` (the row goes to the quarantine table, not to the table: one row of it, naming the
first quarantine rule it broke and why it broke each, its text once whatever their number),
``drop`` (the row is not kept, and is counted) or ``warn`` (the row is kept, and is counted). A row
breaking several rules: quarantined if any of them says so, else dropped if any says so. Every
rule's violations are counted, whatever the others did: per table and rule (``RuleViolations``;
``RuleViolationSurge`` and its alarm when one is broken far more often than usual:
:mod:`glue_processor.metrics.rule_surge`), per object (``load_history.rule_violations``) and per
batch (the run's summary).

Declared types apply first (``columns:``/``--schema``), so a rule sees typed values: a decimal, a
timestamp in UTC (``TIMESTAMP '...'`` without an offset is UTC too, as a declared value is); a column
not declared is a string. Lineage columns (``_line``, ``_source_uri``, ``_event_time``...) may be used.

The language: SQL as Athena (Trino) writes it, parsed by sqlglot and compiled to ``pyarrow.compute``
expressions (:mod:`glue_processor.shared.rule_sql`), which Arrow evaluates on the task's columns where
they are (no copy, no row loop): comparisons, ``AND``/``OR``/``NOT``, ``IS [NOT] NULL``, ``[NOT] IN
(...)``, ``BETWEEN``, ``LIKE``, ``regexp_like``, ``+ - * /`` (checked: an overflow or a bigint's
``/ 0`` is an error, the row quarantined saying so; ``/`` of two bigints truncates, as Trino's does,
and with a decimal or a double is a double), ``length``, ``lower``, ``upper``, ``trim``, ``abs``,
``coalesce``, ``starts_with``, literals (numbers, strings, ``TRUE``/``FALSE``, ``DATE '...'``,
``TIMESTAMP '...'``). Names are the record's keys, as they are cased.
Why these two: sqlglot is a maintained, pure-Python SQL parser (nothing to compile for Glue) that
gives a typed tree in the dialect our users query in; Arrow is what the task's rows already are, and
its compute functions are vectorised and typed, so a rule costs a few passes over the columns it
reads. An embedded engine (DuckDB, DataFusion) would evaluate the same SQL, but it is a second engine
of ~60 MB in every Glue worker, with its own threads inside Spark's Python workers, and casts a
string to a number where a rule compares them, failing the whole batch on the first value that is
not one; here that rule is refused at start-up.

A rule that cannot work is refused before anything runs, in one line naming the table and the rule
(:func:`compile_rules`): SQL that does not parse, more than one statement, a function or construct
not in the list above, a column of a type the expression does not take (``amount > 0`` on an
undeclared, string ``amount``), an expression that is not a boolean. Bounds (contracts/routing.py):
32 rules a table, 4,096 characters a rule, names of 1-64 letters, digits and ``_`` (a metric
dimension and a column value each).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contracts.exceptions import ConfigError
from contracts.routing import Expect, OnFail
from glue_processor.shared import rule_sql
from glue_processor.shared.declared import RESCUED, DeclaredSchema, column_type
from glue_processor.shared.extra import EXTRA
from glue_processor.shared.names import LINEAGE_TYPES  # the lineage columns a rule may read, typed

ON_FAIL: tuple[OnFail, ...] = get_args(OnFail)


@dataclass(frozen=True)
class RuleSpec:
    """One rule as written: its name, its SQL, what a violation does."""

    name: str
    sql: str
    on_fail: OnFail = "quarantine"


@dataclass(frozen=True)
class Verdict:
    """A rule over some rows: which broke it (``failed``), of those which because it was NULL, and
    which because Arrow could not evaluate it on them (``errored``: an overflow, a bigint's / 0)."""

    rule: RuleSpec
    failed: np.ndarray  # bool per row: FALSE, NULL or an error
    null: np.ndarray  # bool per row: NULL
    errored: np.ndarray | None = None  # bool per row: the expression raised on it (None: on none)
    error: str = ""  # what it raised

    def reason(self, row: int) -> str:
        if self.errored is not None and self.errored[row]:
            return f"rule {self.rule.name} could not be evaluated ({self.error}): {self.rule.sql}"
        why = "NULL (a value it reads is missing or NULL)" if self.null[row] else "false"
        return f"rule {self.rule.name} not kept ({self.rule.on_fail}): {self.rule.sql} is {why}"


@dataclass(frozen=True)
class Rules:
    """A table's compiled rules: what each reads (``columns``: name -> type) and how to evaluate them.

    Plain data (the SQL texts and the types), so it travels to the parse tasks as it is; each process
    compiles the expressions once (:func:`rule_sql.compiled`)."""

    specs: tuple[RuleSpec, ...]
    columns: tuple[tuple[str, pa.DataType], ...]

    def evaluate(self, column: Callable[[str], pa.Array | pa.ChunkedArray | None], rows: int) -> list[Verdict]:
        """The rules some of ``rows`` rows broke (a rule every row kept has no verdict: in a healthy
        stream, the common case, that costs one pass over its result's bits), the rows given by
        their columns (``column`` gives one by name; None: no such column in these rows, so NULL)."""
        arrays = []
        for name, type_ in self.columns:
            found = column(name)
            arrays.append(pa.nulls(rows, type_) if found is None else found)
        table = pa.table(arrays, names=[name for name, _ in self.columns]) if arrays else None
        if table is None:  # rules of literals alone
            table = pa.table({"_": pa.nulls(rows, pa.bool_())})
        expressions = [rule_sql.compiled(r.sql, self.columns) for r in self.specs]
        try:
            results = rule_sql.project(table, expressions)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            results = [None] * len(self.specs)  # one rule raised: each on its own, to say which
        out = []
        for i, rule in enumerate(self.specs):
            result = results[i]
            if result is None:  # it raised on some rows: found by halves, the others evaluated
                kept, null, errored, error = _bisected(table, expressions[i])
                if errored.any():
                    out.append(Verdict(rule, ~kept, null, errored, error))
                elif not kept.all():
                    out.append(Verdict(rule, ~kept, null))
                continue
            if result.null_count == 0 and pc.all(result).as_py() is not False:
                continue  # every row kept it
            kept, null = _judged(result)
            out.append(Verdict(rule, ~kept, null))
        return out


# The most evaluations a rule that raised on some rows gets to find them, halving the rows that
# raise: a few rows that overflow are found exactly (~2 log2(rows) evaluations each); past it, the
# halves left are counted as rows that raised, so a piece whose every row raises costs 64, not one a row.
SPLITS = 64


def _bisected(table: pa.Table, expression: pc.Expression) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(kept, NULL, raised) per row of ``table`` for an expression that raised on some of them, and
    the first error."""
    rows = len(table)
    kept, null, errored = np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool)
    error, calls, pending = "", 0, [(0, rows)]
    while pending:
        start, stop = pending.pop()
        if calls >= SPLITS:
            errored[start:stop] = True
            continue
        calls += 1
        try:
            result = rule_sql.project(table.slice(start, stop - start), [expression])[0]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            error = error or str(exc).splitlines()[0][:300]
            if stop - start == 1:
                errored[start] = True
            else:
                middle = (start + stop) // 2
                pending += [(middle, stop), (start, middle)]
            continue
        kept[start:stop], null[start:stop] = _judged(result)
    return kept, null, errored, error


def _judged(result: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(kept: TRUE, NULL) per row of a rule's result."""
    return (
        pc.fill_null(result, False).to_numpy(zero_copy_only=False),
        pc.is_null(result).to_numpy(zero_copy_only=False),
    )


def rule_specs(expect: Expect) -> tuple[RuleSpec, ...]:
    """The rules of a validated ``expect:`` mapping (contracts.routing: names, bounds, modes)."""
    return tuple(
        RuleSpec(name, spec, "quarantine") if isinstance(spec, str) else RuleSpec(name, spec.sql, spec.on_fail)
        for name, spec in expect.items()
    )


def compile_rules(specs: tuple[RuleSpec, ...], declared: DeclaredSchema | None, *, where: str) -> Rules | None:
    """The table's rules, each checked now: a :class:`ConfigError` in one line naming the table and
    the rule that cannot work (None: no rules)."""
    if not specs:
        return None
    reads: dict[str, dict[str, pa.DataType]] = {}  # rule -> the columns it reads, typed
    for rule in specs:
        try:
            reads[rule.name] = {name: _type_of(name, declared) for name in rule_sql.columns_of(rule_sql.tree(rule.sql))}
        except rule_sql.Refused as exc:
            raise ConfigError(f"{where}: rule {rule.name!r} ({rule.sql}): {exc}") from None
    rules = Rules(specs, tuple(sorted({n: t for typed in reads.values() for n, t in typed.items()}.items())))
    for rule in specs:
        _check(rule, reads[rule.name], rules.columns, declared, where=where)
    return rules


def _check(
    rule: RuleSpec,
    names: dict[str, pa.DataType],
    columns: tuple[tuple[str, pa.DataType], ...],
    declared: DeclaredSchema | None,
    *,
    where: str,
) -> None:
    """Compile the rule and run it on two rows of its columns (NULLs, then a value of each type), so
    a type Arrow has no kernel for, or a pattern it cannot compile, is found now, not in a batch."""
    what = f"{where}: rule {rule.name!r} ({rule.sql})"
    try:
        expression = rule_sql.compiled(rule.sql, columns)
    except rule_sql.TypesDoNotFit as exc:
        raise ConfigError(
            f"{what}: its types do not go together ({_described(names, declared)}; Arrow: {exc})"
        ) from None
    except rule_sql.Refused as exc:
        raise ConfigError(f"{what}: {exc}") from None
    sample = pa.table(
        [pa.array([None, _some(t)], t) for t in names.values()] or [pa.nulls(2)], names=list(names) or ["_"]
    )
    try:
        result = rule_sql.project(sample, [expression])[0]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        message = str(exc).splitlines()[0]
        raise ConfigError(
            f"{what}: its types do not go together ({_described(names, declared)}; Arrow: {message})"
        ) from None
    if not pa.types.is_boolean(result.type):
        raise ConfigError(f"{what}: is of type {_type_name(result.type)}, not a boolean condition")


def _some(type_: pa.DataType) -> Any:
    """A value of the type, to run a rule on."""
    if pa.types.is_string(type_):
        return "x"
    if pa.types.is_boolean(type_):
        return True
    if pa.types.is_decimal(type_):
        return Decimal(1).scaleb(-type_.scale)
    if pa.types.is_timestamp(type_):
        return datetime(2000, 1, 1, tzinfo=UTC)
    if pa.types.is_date(type_):
        return datetime(2000, 1, 1).date()
    return 1


def _described(names: dict[str, pa.DataType], declared: DeclaredSchema | None) -> str:
    """The rule's columns and their types, saying which are strings because nothing declares them."""
    if not names:
        return "it reads no column"
    parts = []
    for name, type_ in names.items():
        undeclared = name not in LINEAGE_TYPES and (declared is None or declared.get(name) is None)
        parts.append(f"{name} is {'an undeclared column, a string' if undeclared else _type_name(type_)}")
    return ", ".join(parts)


def _type_name(type_: pa.DataType) -> str:
    if pa.types.is_string(type_):
        return "string"
    if pa.types.is_timestamp(type_):
        return "timestamp"
    if pa.types.is_date(type_):
        return "date"
    if pa.types.is_decimal(type_):
        return f"decimal({type_.precision},{type_.scale})"
    return {"int64": "bigint", "double": "double", "bool": "boolean"}.get(str(type_), str(type_))


def _type_of(name: str, declared: DeclaredSchema | None) -> pa.DataType:
    if name in LINEAGE_TYPES:
        return LINEAGE_TYPES[name]
    if name in (EXTRA, RESCUED):
        raise rule_sql.Refused(f"{name} is a map of the job's own; a rule reads the record's columns")
    return column_type(name, declared)


def misnamed(rules: Rules, keys: Collection[str]) -> list[tuple[str, str]]:
    """(a column a rule reads, the table's key it probably means) for each column no key of the
    table is but another case of one is: names are the record's keys, case and all, so a rule over
    ``Country`` where the records say ``country`` reads NULL in every row, and breaks for each."""
    by_case = {k.lower(): k for k in keys}
    return [
        (name, by_case[name.lower()])
        for name, _ in rules.columns
        if name not in LINEAGE_TYPES and name not in keys and name.lower() in by_case
    ]
