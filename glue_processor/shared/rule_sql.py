"""A rule's SQL as an Arrow expression: sqlglot's tree, translated node by node.

sqlglot parses the rule in the dialect Athena (Trino) writes; :class:`_Compiler` turns each node it
knows into the ``pyarrow.compute`` function that does the same, with SQL's NULLs (Arrow's Kleene
``and``/``or``; ``x IN (...)`` NULL when ``x`` is), and refuses every other node (:class:`Refused`,
which :mod:`glue_processor.shared.rules` words as the one line naming the table and the rule). No
expression is evaluated here but by Arrow's engine (:func:`project`).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import acero

from glue_processor.shared.names import STRING, TIMESTAMP

DIALECT = "trino"


def project(table: pa.Table, expressions: list[pc.Expression]) -> list[pa.ChunkedArray]:
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


class Refused(Exception):
    """What in a rule cannot work (said in the ConfigError that names the rule)."""


class TypesDoNotFit(Refused):
    """Arrow has no kernel for the rule's types (its message, which the ConfigError words with the
    types of the rule's columns)."""


def tree(sql: str) -> Any:
    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except (ParseError, TokenError) as exc:
        raise Refused(f"not SQL: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise Refused("one expression, not several statements")
    return statements[0]


def columns_of(tree: Any) -> list[str]:
    from sqlglot import expressions as exp

    out = []
    for column in tree.find_all(exp.Column):
        if column.table:
            raise Refused(f"{column.sql()}: a column of the record, without a table name")
        out.append(column.name)
    return out


@functools.lru_cache(maxsize=256)
def compiled(sql: str, columns: tuple[tuple[str, pa.DataType], ...]) -> pc.Expression:
    """The rule as a pyarrow.compute expression (each process compiles each rule once)."""
    try:
        return _Compiler(dict(columns)).expression(tree(sql))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise TypesDoNotFit(str(exc).splitlines()[0]) from None


class _Compiler:
    """sqlglot's tree of a rule into a pyarrow.compute expression, node by node; what has no
    counterpart here is refused (:class:`_Refused`)."""

    def __init__(self, columns: dict[str, pa.DataType]) -> None:
        self.columns = columns

    def type_of(self, expression: pc.Expression) -> pa.DataType:
        """The type of an expression over the rule's columns (Arrow binds it on no rows)."""
        empty = pa.schema(list(self.columns.items()) or [("_", pa.bool_())]).empty_table()
        try:
            return project(empty, [expression])[0].type
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise TypesDoNotFit(str(exc).splitlines()[0]) from None

    def operands(self, left: Any, right: Any) -> tuple[Any, Any]:
        """Two operands of a comparison or arithmetic; a number beside an expression typed as that
        expression needs (a decimal beside a decimal, a double beside a double, a bigint beside an
        integer), so Arrow neither widens the column nor refuses a pair it has no kernel for."""
        if _is_constant(left) and not _is_constant(right):
            b, a = self.operands(right, left)
            return a, b
        a = self.expression(left)
        if not _is_constant(right):
            return a, self.expression(right)
        return a, pc.scalar(_beside(_literal(right), self.type_of(a)))

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
        # a node sqlglot gives options this translation does not honour: refused, not ignored
        if node.args.get("symmetric") or (isinstance(node, exp.RegexpLike) and node.args.get("flag")):
            raise Refused(f"{node.sql(dialect=DIALECT)}: not something a rule may use ({SUPPORTED})")
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
                return getattr(pc, function)(*self.operands(node.this, node.expression))
        # checked: an overflow is an error (the row is quarantined saying so), as in Trino, not a wrap
        arithmetic = {exp.Add: "add_checked", exp.Sub: "subtract_checked", exp.Mul: "multiply_checked"}
        for kind, function in arithmetic.items():
            if type(node) is kind:
                return getattr(pc, function)(*self.operands(node.this, node.expression))
        if isinstance(node, exp.Div):
            left, right = self.operands(node.this, node.expression)
            if all(pa.types.is_integer(self.type_of(x)) for x in (left, right)):
                return pc.divide_checked(left, right)  # bigint / bigint: truncated, / 0 an error, as Trino's
            # with a decimal or a double: a double quotient (x / 0 infinite, as Trino's double is)
            return pc.divide(left.cast(pa.float64()), right.cast(pa.float64()))
        if isinstance(node, exp.Neg):
            return pc.negate_checked(e(node.this))
        if isinstance(node, exp.Is):
            target = node.expression
            if isinstance(target, exp.Null):
                return e(node.this).is_null()
            if isinstance(target, exp.Boolean):
                value = e(node.this)
                return pc.coalesce(value if target.this else ~value, pc.scalar(False))
            raise Refused(f"{node.sql(dialect=DIALECT)}: IS takes NULL, TRUE or FALSE")
        if isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
                raise Refused("IN takes a list of values")
            values = node.expressions
            if not values or not all(_is_constant(v) and not isinstance(v, exp.Null) for v in values):
                raise Refused("IN takes a list of values that are not NULL")
            subject = e(node.this)
            value_set = _value_set(self.type_of(subject), [_literal(v) for v in values])
            # SQL: NULL IN (...) is NULL (Arrow's is_in says false)
            return pc.if_else(
                subject.is_null(), pc.scalar(pa.scalar(None, pa.bool_())), pc.is_in(subject, value_set=value_set)
            )
        if isinstance(node, exp.Between):
            subject, low = self.operands(node.this, node.args["low"])
            _, high = self.operands(node.this, node.args["high"])
            return (subject >= low) & (subject <= high)
        if isinstance(node, (exp.Like, exp.ILike)):
            pattern = node.expression
            if not (isinstance(pattern, exp.Literal) and pattern.is_string) or node.args.get("escape"):
                raise Refused("LIKE takes a string pattern (without ESCAPE)")
            # Trino's LIKE has no escape character without ESCAPE; Arrow's takes a backslash as one
            literal = pattern.this.replace("\\", "\\\\")
            return pc.match_like(e(node.this), pattern=literal, ignore_case=isinstance(node, exp.ILike))
        if isinstance(node, exp.RegexpLike):
            pattern = node.expression
            if not (isinstance(pattern, exp.Literal) and pattern.is_string):
                raise Refused("regexp_like takes a string pattern")
            return pc.match_substring_regex(e(node.this), pattern=pattern.this)
        if isinstance(node, exp.StartsWith):
            prefix = node.expression
            if not (isinstance(prefix, exp.Literal) and prefix.is_string):
                raise Refused("starts_with takes a string prefix")
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
            return pc.abs_checked(e(node.this))
        if isinstance(node, exp.Coalesce):  # Arrow's takes one type: the others cast to the first's
            first = e(node.this)
            target = self.type_of(first)
            rest = [pc.scalar(_beside(_literal(x), target)) if _is_constant(x) else e(x) for x in node.expressions]
            return pc.coalesce(first, *(x.cast(target) for x in rest))
        if isinstance(node, exp.Cast):
            raise Refused(
                f"{node.sql(dialect=DIALECT)}: a column's type comes from its declared type (columns:), not a CAST"
            )
        if isinstance(node, (exp.Anonymous, exp.Func)):
            name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
            raise Refused(f"function {name.lower()}() is not one a rule may use ({SUPPORTED})")
        raise Refused(f"{node.sql(dialect=DIALECT)}: not something a rule may use ({SUPPORTED})")


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
    """A constant of the rule as an Arrow scalar: a number (:func:`_number`), a string, a boolean, a
    date, a timestamp in UTC."""
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
        raise Refused(f"{kind} {text!r}: {exc}") from None
    if kind.startswith("DECIMAL") or kind in ("DOUBLE", "BIGINT", "INT"):
        return _number(text)
    raise Refused(f"{node.sql(dialect=DIALECT)}: a literal of type {kind.lower()} is not one a rule may use")


def _number(text: str) -> pa.Scalar:
    """A number as SQL types it: an integer a bigint (a decimal past it), one with a point an exact
    decimal, one with an exponent a double (:meth:`_Compiler.operands` retypes it beside a column)."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise Refused(f"{text!r} is not a number") from None
    if "e" in text.lower() or not value.is_finite() or len(value.as_tuple().digits) > 38:
        return pa.scalar(float(value), pa.float64())
    if "." not in text and -(2**63) <= value < 2**63:
        return pa.scalar(int(value), pa.int64())
    return pa.scalar(value)


def _beside(value: pa.Scalar, beside: pa.DataType) -> pa.Scalar:
    """A number typed as an expression of type ``beside`` needs it: a decimal beside a decimal (an
    int64 Arrow would make a decimal(19,0), and a decimal(12,2) beside it one of 21 digits, which
    Arrow refuses), a double beside a double."""
    if pa.types.is_integer(value.type) or pa.types.is_decimal(value.type):
        if pa.types.is_decimal(beside):
            return pa.scalar(Decimal(str(value.as_py())))
        if pa.types.is_floating(beside):
            return pa.scalar(float(value.as_py()), pa.float64())
    return value


def _value_set(subject: pa.DataType, values: list[pa.Scalar]) -> pa.Array:
    """An IN list in its subject's type; a value that is not one (a number beside a string, 0.5
    beside a bigint, 1.555 beside a decimal(12,2)) refuses the rule rather than being cut to fit."""
    numeric = pa.types.is_integer(subject) or pa.types.is_floating(subject) or pa.types.is_decimal(subject)
    for v in values:
        number = pa.types.is_integer(v.type) or pa.types.is_floating(v.type) or pa.types.is_decimal(v.type)
        if number != numeric:
            raise Refused(f"IN lists {v.as_py()!r} beside a column of type {subject}")
    python = [v.as_py() for v in values]
    try:
        if pa.types.is_floating(subject):
            return pa.array([float(x) for x in python], subject)
        if pa.types.is_decimal(subject):  # exact: 1.555 beside a decimal(12,2) is refused, not rounded
            return pa.array([Decimal(str(x)) for x in python], subject)
        return pa.array(python).cast(subject, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise Refused(f"IN lists a value of another type than {subject} ({str(exc).splitlines()[0]})") from None
