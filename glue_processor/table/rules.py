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
rule's violations are counted, whatever the others did: per table and rule (``RuleViolations``),
per object (``load_history.rule_violations``) and per batch (the run's summary).

Declared types apply first (``columns:``/``--schema``), so a rule sees typed values: a decimal, a
timestamp in UTC (``TIMESTAMP '...'`` without an offset is UTC too, as a declared value is); a column
not declared is a string. Lineage columns (``_line``, ``_source_uri``, ``_event_time``...) may be used.

The language: SQL as Athena (Trino) writes it, parsed by sqlglot and compiled to ``pyarrow.compute``
expressions, which Arrow evaluates on the task's columns where they are (no copy, no row loop):
comparisons, ``AND``/``OR``/``NOT``, ``IS [NOT] NULL``, ``[NOT] IN (...)``, ``BETWEEN``, ``LIKE``,
``regexp_like``, ``+ - * /``, ``length``, ``lower``, ``upper``, ``trim``, ``abs``, ``coalesce``,
``starts_with``, literals (numbers, strings, ``TRUE``/``FALSE``, ``DATE '...'``, ``TIMESTAMP '...'``).
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

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import acero

from contracts.exceptions import ConfigError
from contracts.routing import Expect, OnFail
from glue_processor.read.ndjson import STRING
from glue_processor.table.declared import TIMESTAMP, DeclaredSchema

ON_FAIL: tuple[OnFail, ...] = get_args(OnFail)
# the lineage columns a rule may read, with their types (glue_processor/read/names.py)
LINEAGE_TYPES: dict[str, pa.DataType] = {
    "_source_uri": STRING,
    "_source_etag": STRING,
    "_line": pa.int64(),
    "_event_time": TIMESTAMP,
    "_batch_id": pa.int64(),
    "_ingest_time": TIMESTAMP,
}
_MAPS = ("_extra", "_rescued")
DIALECT = "trino"


@dataclass(frozen=True)
class RuleSpec:
    """One rule as written: its name, its SQL, what a violation does."""

    name: str
    sql: str
    on_fail: OnFail = "quarantine"


@dataclass(frozen=True)
class Verdict:
    """A rule over some rows: which broke it (``failed``), and of those which because it was NULL."""

    rule: RuleSpec
    failed: np.ndarray  # bool per row: FALSE or NULL
    null: np.ndarray  # bool per row: NULL
    error: str | None = None  # the expression raised on these rows (every row counts as failed)

    def reason(self, row: int) -> str:
        if self.error is not None:
            return f"rule {self.rule.name} could not be evaluated ({self.error}): {self.rule.sql}"
        why = "NULL (a value it reads is missing or NULL)" if self.null[row] else "false"
        return f"rule {self.rule.name} not kept ({self.rule.on_fail}): {self.rule.sql} is {why}"


@dataclass(frozen=True)
class Rules:
    """A table's compiled rules: what each reads (``columns``: name -> type) and how to evaluate them.

    Plain data (the SQL texts and the types), so it travels to the parse tasks as it is; each process
    compiles the expressions once (:func:`_compiled`)."""

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
        expressions = [_compiled(r.sql, self.columns) for r in self.specs]
        try:
            results = _project(table, expressions)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            results = [None] * len(self.specs)  # one rule raised: each on its own, to say which
        out = []
        for i, rule in enumerate(self.specs):
            result, error = results[i], None
            if result is None:
                try:
                    result = _project(table, [expressions[i]])[0]
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                    error = str(exc).splitlines()[0][:300]
            if result is None:
                everything = np.ones(rows, dtype=bool)
                out.append(Verdict(rule, everything, np.zeros(rows, dtype=bool), error))
                continue
            if result.null_count == 0 and pc.all(result).as_py() is not False:
                continue  # every row kept it
            kept = pc.fill_null(result, False).to_numpy(zero_copy_only=False)
            null = pc.is_null(result).to_numpy(zero_copy_only=False)
            out.append(Verdict(rule, ~kept, null))
        return out


def _project(table: pa.Table, expressions: list[pc.Expression]) -> list[pa.ChunkedArray]:
    """The expressions over ``table``, by Arrow's engine (one pass, the task's own thread)."""
    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
            acero.Declaration(
                "project", acero.ProjectNodeOptions(expressions, [f"r{i}" for i in range(len(expressions))])
            ),
        ]
    )
    result = plan.to_table(use_threads=False)
    return [result.column(i) for i in range(len(expressions))]


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
    columns: dict[str, pa.DataType] = {}
    for rule in specs:
        try:
            for name in _columns_of(_tree(rule.sql)):
                columns[name] = _type_of(name, declared)
        except _Refused as exc:
            raise ConfigError(f"{where}: rule {rule.name!r} ({rule.sql}): {exc}") from None
    rules = Rules(specs, tuple(sorted(columns.items())))
    for rule in specs:
        _check(
            rule,
            {n: t for n, t in rules.columns if n in _columns_of(_tree(rule.sql))},
            rules.columns,
            declared,
            where=where,
        )
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
        expression = _compiled(rule.sql, columns)
    except _Refused as exc:
        raise ConfigError(f"{what}: {exc}") from None
    sample = pa.table(
        [pa.array([None, _some(t)], t) for t in names.values()] or [pa.nulls(2)], names=list(names) or ["_"]
    )
    try:
        result = _project(sample, [expression])[0]
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
    if name in _MAPS:
        raise _Refused(f"{name} is a map of the job's own; a rule reads the record's columns")
    column = declared.get(name) if declared is not None else None
    return column.arrow_type if column is not None else STRING


class _Refused(Exception):
    """What in a rule cannot work (said in the ConfigError that names the rule)."""


def _tree(sql: str) -> Any:
    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except (ParseError, TokenError) as exc:
        raise _Refused(f"not SQL: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise _Refused("one expression, not several statements")
    return statements[0]


def _columns_of(tree: Any) -> list[str]:
    from sqlglot import expressions as exp

    out = []
    for column in tree.find_all(exp.Column):
        if column.table:
            raise _Refused(f"{column.sql()}: a column of the record, without a table name")
        out.append(column.name)
    return out


@functools.lru_cache(maxsize=256)
def _compiled(sql: str, columns: tuple[tuple[str, pa.DataType], ...]) -> pc.Expression:
    """The rule as a pyarrow.compute expression (each process compiles each rule once)."""
    return _Compiler(dict(columns)).expression(_tree(sql))


class _Compiler:
    """sqlglot's tree of a rule into a pyarrow.compute expression, node by node; what has no
    counterpart here is refused (:class:`_Refused`)."""

    def __init__(self, columns: dict[str, pa.DataType]) -> None:
        self.columns = columns

    def type_of(self, expression: pc.Expression) -> pa.DataType:
        """The type of an expression over the rule's columns (Arrow binds it on no rows)."""
        empty = pa.schema(list(self.columns.items()) or [("_", pa.bool_())]).empty_table()
        try:
            return _project(empty, [expression])[0].type
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise _Refused(f"its types do not go together ({str(exc).splitlines()[0]})") from None

    def expression(self, node: Any) -> Any:
        """The node's expression; negated where sqlglot marks the node so (``NOT LIKE``, ``NOT ILIKE``)."""
        compiled = self._one(node)
        return ~compiled if node.args.get("negate") else compiled

    def _one(self, node: Any) -> Any:  # one case per SQL construct
        from sqlglot import expressions as exp

        e = self.expression
        if isinstance(node, exp.Paren):
            return e(node.this)
        if isinstance(node, exp.Column):
            return pc.field(node.name)
        if _is_constant(node):
            return pc.scalar(_literal(node))
        if isinstance(node, exp.And):
            return e(node.this) & e(node.expression)
        if isinstance(node, exp.Or):
            return e(node.this) | e(node.expression)
        if isinstance(node, exp.Not):
            return ~e(node.this)
        comparisons = {exp.EQ: "equal", exp.NEQ: "not_equal", exp.GT: "greater", exp.GTE: "greater_equal"}
        comparisons.update({exp.LT: "less", exp.LTE: "less_equal"})
        for kind, function in comparisons.items():
            if type(node) is kind:
                return getattr(pc, function)(e(node.this), e(node.expression))
        arithmetic = {exp.Add: "add", exp.Sub: "subtract", exp.Mul: "multiply"}
        for kind, function in arithmetic.items():
            if type(node) is kind:
                return getattr(pc, function)(e(node.this), e(node.expression))
        if isinstance(node, exp.Div):  # a real quotient (x / 0 is infinite, not an error)
            return pc.divide(e(node.this).cast(pa.float64()), e(node.expression).cast(pa.float64()))
        if isinstance(node, exp.Neg):
            return pc.negate(e(node.this))
        if isinstance(node, exp.Is):
            target = node.expression
            if isinstance(target, exp.Null):
                return e(node.this).is_null()
            if isinstance(target, exp.Boolean):
                value = e(node.this)
                return pc.coalesce(value if target.this else ~value, pc.scalar(False))
            raise _Refused(f"{node.sql(dialect=DIALECT)}: IS takes NULL, TRUE or FALSE")
        if isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
                raise _Refused("IN takes a list of values")
            values = node.expressions
            if not values or not all(_is_constant(v) and not isinstance(v, exp.Null) for v in values):
                raise _Refused("IN takes a list of values that are not NULL")
            scalars = [_literal(v) for v in values]
            value_set = pa.array([s.as_py() for s in scalars], scalars[0].type)
            subject = e(node.this)
            # SQL: NULL IN (...) is NULL (Arrow's is_in says false)
            return pc.if_else(
                subject.is_null(), pc.scalar(pa.scalar(None, pa.bool_())), pc.is_in(subject, value_set=value_set)
            )
        if isinstance(node, exp.Between):
            subject = e(node.this)
            return (subject >= e(node.args["low"])) & (subject <= e(node.args["high"]))
        if isinstance(node, (exp.Like, exp.ILike)):
            pattern = node.expression
            if not (isinstance(pattern, exp.Literal) and pattern.is_string) or node.args.get("escape"):
                raise _Refused("LIKE takes a string pattern (without ESCAPE)")
            return pc.match_like(e(node.this), pattern=pattern.this, ignore_case=isinstance(node, exp.ILike))
        if isinstance(node, exp.RegexpLike):
            pattern = node.expression
            if not (isinstance(pattern, exp.Literal) and pattern.is_string):
                raise _Refused("regexp_like takes a string pattern")
            return pc.match_substring_regex(e(node.this), pattern=pattern.this)
        if isinstance(node, exp.StartsWith):
            prefix = node.expression
            if not (isinstance(prefix, exp.Literal) and prefix.is_string):
                raise _Refused("starts_with takes a string prefix")
            return pc.starts_with(e(node.this), pattern=prefix.this)
        if isinstance(node, exp.Length):
            return pc.utf8_length(e(node.this)).cast(pa.int64())
        if isinstance(node, exp.Lower):
            return pc.utf8_lower(e(node.this))
        if isinstance(node, exp.Upper):
            return pc.utf8_upper(e(node.this))
        if isinstance(node, exp.Trim) and not node.args.get("expression") and not node.args.get("position"):
            return pc.utf8_trim_whitespace(e(node.this))
        if isinstance(node, exp.Abs):
            return pc.abs(e(node.this))
        if isinstance(node, exp.Coalesce):  # Arrow's takes one type: the others cast to the first's
            first = e(node.this)
            target = self.type_of(first)
            return pc.coalesce(first, *(e(x).cast(target) for x in node.expressions))
        if isinstance(node, exp.Cast):
            raise _Refused(
                f"{node.sql(dialect=DIALECT)}: a column's type comes from its declared type (columns:), not a CAST"
            )
        if isinstance(node, (exp.Anonymous, exp.Func)):
            name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
            raise _Refused(f"function {name.lower()}() is not one a rule may use ({SUPPORTED})")
        raise _Refused(f"{node.sql(dialect=DIALECT)}: not something a rule may use ({SUPPORTED})")


SUPPORTED = (
    "comparisons, AND/OR/NOT, IS [NOT] NULL, IN, BETWEEN, LIKE, + - * /, regexp_like, length, lower, upper, "
    "trim, abs, coalesce, starts_with"
)


def _is_constant(node: Any) -> bool:
    from sqlglot import expressions as exp

    if isinstance(node, (exp.Literal, exp.Boolean, exp.Null)):
        return True
    if isinstance(node, exp.Neg):
        return isinstance(node.this, exp.Literal) and not node.this.is_string
    return isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string


def _literal(node: Any) -> pa.Scalar:
    """A constant of the rule as an Arrow scalar: a number as a small integer or an exact decimal
    (Arrow compares either with any numeric column), a date, a timestamp in UTC."""
    from sqlglot import expressions as exp

    if isinstance(node, exp.Null):
        return pa.scalar(None, pa.null())
    if isinstance(node, exp.Boolean):
        return pa.scalar(bool(node.this), pa.bool_())
    if isinstance(node, exp.Neg):
        number = _literal(node.this)
        return pa.scalar(-number.as_py(), number.type)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return pa.scalar(node.this, STRING)
        return _number(node.this)
    text, kind = node.this.this, node.to.this.value  # CAST('...' AS <type>), as DATE '...' parses
    try:
        if kind == "DATE":
            return pa.scalar(datetime.fromisoformat(text).date(), pa.date32())
        if kind.startswith("TIMESTAMP"):
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
            return pa.scalar(when if when.tzinfo else when.replace(tzinfo=UTC), TIMESTAMP)
    except ValueError as exc:
        raise _Refused(f"{kind} {text!r}: {exc}") from None
    if kind.startswith("DECIMAL") or kind in ("DOUBLE", "BIGINT", "INT"):
        return _number(text)
    raise _Refused(f"{node.sql(dialect=DIALECT)}: a literal of type {kind.lower()} is not one a rule may use")


def _number(text: str) -> pa.Scalar:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise _Refused(f"{text!r} is not a number") from None
    if "e" in text.lower() or not value.is_finite() or len(value.as_tuple().digits) > 38:
        return pa.scalar(float(value), pa.float64())
    if value == value.to_integral_value() and "." not in text:
        # an integer in the smallest type that holds it: Arrow compares it with any numeric column
        # without widening the column (an int64 column against a decimal literal casts every value)
        for type_ in (pa.int8(), pa.int16(), pa.int32()):
            bits = type_.bit_width - 1
            if -(2**bits) <= value < 2**bits:
                return pa.scalar(int(value), type_)
    return pa.scalar(value)
