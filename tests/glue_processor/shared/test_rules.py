"""The tables' rules: what compiles, what is refused at start-up (one line naming table and rule), and
what a rule says of typed rows, with SQL's NULLs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from contracts.exceptions import ConfigError
from contracts.routing import parse_expect, parse_routing
from glue_processor.shared.declared import parse_schema
from glue_processor.shared.names import TIMESTAMP
from glue_processor.shared.rules import Rules, compile_rules, rule_specs

DECLARED = parse_schema(
    '{"columns": {"amount": "decimal(12,2)", "ts": "timestamp", "qty": "bigint", "paid": "boolean", "day": "date"}}'
)


def rules(expect: dict[str, Any]) -> Rules:
    compiled = compile_rules(rule_specs(parse_expect(json.dumps(expect))), DECLARED, where="table 'orders'")
    assert compiled is not None
    return compiled


def failed(compiled: Rules, columns: dict[str, pa.Array]) -> dict[str, list[bool]]:
    """Each rule's broken rows (a rule no row broke has no verdict: all False)."""
    rows = len(next(iter(columns.values())))
    verdicts = {v.rule.name: v.failed.tolist() for v in compiled.evaluate(columns.get, rows)}
    return {r.name: verdicts.get(r.name, [False] * rows) for r in compiled.specs}


ROWS = {
    "amount": pa.array([Decimal("12.50"), Decimal("-1.00"), None, Decimal("0.01")], pa.decimal128(12, 2)),
    "ts": pa.array(
        [
            datetime(2026, 1, 1, tzinfo=UTC),
            datetime(2019, 12, 31, 23, 59, tzinfo=UTC),
            None,
            datetime(2020, 1, 1, tzinfo=UTC),
        ],
        TIMESTAMP,
    ),
    "country": pa.array(["DE", "FR", None, "US"]),
    "sku": pa.array(["ABCDEFGHIJKL", "short", "ABCDEFGHIJKL", None]),
    "event_id": pa.array(["e1", None, "e3", "e4"]),
    "_line": pa.array([1, 2, 3, 4], pa.int64()),
}


def test_the_issues_rules_hold_on_typed_values_and_a_null_breaks_a_rule() -> None:
    # Given the rules the issue names, a decimal and a timestamp among them
    compiled = rules(
        {
            "positive_amount": "amount > 0",
            "has_id": "event_id IS NOT NULL",
            "known_country": {"sql": "country IN ('DE','US')", "on_fail": "drop"},
            "sku_length": {"sql": "length(sku) = 12", "on_fail": "warn"},
            "recent": "ts >= TIMESTAMP '2020-01-01 00:00:00'",
            "missing_ok": "amount IS NULL OR amount > 0",
        }
    )
    # When they are evaluated on four rows (the third has no amount, ts or country)
    got = failed(compiled, ROWS)
    # Then a rule is kept only where it is TRUE: FALSE and NULL both break it
    assert got == {
        "positive_amount": [False, True, True, False],
        "has_id": [False, True, False, False],
        "known_country": [False, True, True, False],
        "sku_length": [False, True, False, True],
        "recent": [False, True, True, False],
        "missing_ok": [False, True, False, False],
    }
    # and the reason tells FALSE from NULL
    verdict = next(v for v in compiled.evaluate(ROWS.get, 4) if v.rule.name == "positive_amount")
    assert verdict.reason(1) == "rule positive_amount not kept (quarantine): amount > 0 is false"
    assert "is NULL (a value it reads is missing or NULL)" in verdict.reason(2)


def test_sql_constructs_compile_to_arrow_with_sqls_semantics() -> None:
    compiled = rules(
        {
            "not_in": "country NOT IN ('FR')",  # NULL NOT IN (...) is NULL, not TRUE
            "between": "amount BETWEEN 0 AND 20",
            "like": "sku LIKE 'ABC%'",
            "not_like": "sku NOT LIKE 'ABC%'",  # sqlglot marks it with negate, not a NOT node
            "not_ilike": "country NOT ILIKE 'de'",
            "regexp": "regexp_like(sku, '^[A-Z]{12}$')",
            "arith": "amount * 2 - 1 > 0 AND amount / 0 > 0",  # a real quotient: x / 0 is infinite, not an error
            "lower": "lower(country) <> 'fr' AND upper(trim(country)) = country",
            "coalesce": "coalesce(amount, 0) >= 0",
            "lineage": "_line < 4",
            "ts_offset": "ts < TIMESTAMP '2026-01-01T01:00:00+02:00'",  # 2025-12-31 23:00 UTC
        }
    )
    assert failed(compiled, ROWS) == {
        "not_in": [False, True, True, False],
        "between": [False, True, True, False],
        "like": [False, True, False, True],
        "not_like": [True, False, True, True],
        "not_ilike": [True, False, True, False],
        "regexp": [False, True, False, True],
        "arith": [False, True, True, True],
        "lower": [False, True, True, False],
        "coalesce": [False, True, False, False],
        "lineage": [False, False, False, True],
        "ts_offset": [True, False, True, False],
    }


def test_a_column_no_row_has_is_null_and_breaks_the_rule() -> None:
    compiled = rules({"has_ref": "ref IS NOT NULL", "no_ref_ok": "ref IS NULL"})
    assert failed(compiled, {"_line": pa.array([1, 2])}) == {"has_ref": [True, True], "no_ref_ok": [False, False]}


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ("amount >", "not SQL"),
        ("foo(amount) = 1", "function foo() is not one a rule may use"),
        ("country > 0", "country is an undeclared column, a string"),  # compares a string with a number
        ("length(amount) = 3", "amount is decimal(12,2)"),
        ("amount + 1", "is of type decimal(13,2), not a boolean condition"),
        ("CAST(country AS INT) > 1", "a column's type comes from its declared type"),
        ("a = 1; DROP TABLE x", "one expression, not several statements"),
        ("_extra IS NULL", "_extra is a map of the job's own"),
        ("country IN ('DE', NULL)", "IN takes a list of values that are not NULL"),
        ("ts > TIMESTAMP 'yesterday'", "TIMESTAMP 'yesterday'"),
        ("o.amount > 0", "a column of the record, without a table name"),
        ("country IN (SELECT 1)", "IN takes a list of values"),
        ("paid > 'x'", "paid is boolean"),
        ("regexp_like(country, '(')", "regexp_like"),
        # what sqlglot parses but the rule would not honour (review of issue 47)
        ("qty IN (1, 0.5)", "IN lists a value of another type than int64"),
        ("amount IN (1.555)", "IN lists a value of another type than decimal128(12, 2)"),
        ("path IN (1, 2)", "IN lists 1 beside a column of type string"),
        ("qty BETWEEN SYMMETRIC 3 AND 1", "not something a rule may use"),
        ("regexp_like(path, 'a', 'i')", "not something a rule may use"),
    ],
)
def test_a_rule_that_cannot_work_is_refused_in_one_line_naming_table_and_rule(sql: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        rules({"my_rule": sql})
    message = str(caught.value)
    assert message.startswith(f"table 'orders': rule 'my_rule' ({sql}): "), message
    assert says in message and "\n" not in message


def test_the_routing_file_names_a_bad_rule_with_its_table_before_anything_runs() -> None:
    from glue_processor.plan.routes import resolve
    from glue_processor.settings import settings_from_mapping

    routing = parse_routing(
        '{"tables": {"orders": {"columns": {"amount": "decimal(12,2)"}, "expect": {"pos": "amount > 0", '
        '"bad": {"sql": "amount LIKE 1", "on_fail": "warn"}}}}, "routes": [{"table": "orders"}]}'
    )
    roots = {k: f"file:///tmp/{k}" for k in ("manifest_uri", "output_uri", "quarantine_uri", "checkpoint_uri")}
    with pytest.raises(ConfigError, match=r"^routes.json: table 'orders': rule 'bad' \(amount LIKE 1\): "):
        resolve(settings_from_mapping(roots), routing, source="routes.json")


def test_rule_names_modes_and_counts_are_bounded_by_the_contract() -> None:
    with pytest.raises(ConfigError, match="String should match pattern"):
        parse_expect('{"bad name": "a = 1"}')
    with pytest.raises(ConfigError, match="'quarantine', 'drop' or 'warn'"):
        parse_expect('{"r": {"sql": "a = 1", "on_fail": "explode"}}')
    with pytest.raises(ConfigError, match="at most 32"):
        parse_expect(json.dumps({f"r{i}": "a = 1" for i in range(33)}))
    with pytest.raises(ConfigError, match="at most 4096"):
        parse_expect(json.dumps({"r": "a = '" + "x" * 4096 + "'"}))


def test_compiled_rules_travel_to_the_tasks_as_plain_data() -> None:
    import pickle

    compiled = rules({"positive_amount": "amount > 0"})
    again = pickle.loads(pickle.dumps(compiled))
    assert failed(again, ROWS) == failed(compiled, ROWS)


def test_a_rule_arrow_cannot_evaluate_on_some_rows_quarantines_them_never_drops_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from glue_processor.read.expect import check
    from glue_processor.shared import rule_sql as module

    # Given two rules, and Arrow failing on the drop rule's expression in these rows (its types were
    # checked at start-up; say a value past what a kernel takes)
    compiled = rules({"fine": "amount > 0", "fragile": {"sql": "amount < 100", "on_fail": "drop"}})
    real = module.project

    def project(table: pa.Table, expressions: list[Any]) -> list[Any]:
        if any("< 100" in str(e) for e in expressions):
            raise pa.ArrowInvalid("overflow")
        return real(table, expressions)

    monkeypatch.setattr(module, "project", project)
    rows = pa.table({"k/amount": ROWS["amount"], "_line": ROWS["_line"]})
    # When the rows are checked
    checked = check(rows, compiled, data_prefix="k/")
    # Then the other rule is evaluated as ever, and every row goes to the quarantine table saying why
    assert checked.dropped == 0 and len(checked.kept) == 0
    assert checked.violations == {"fine": 2, "fragile": 4}
    assert checked.rows.tolist() == [0, 1, 2, 3]
    reasons = {why for _, _, why in checked.broken()}
    assert "rule fragile could not be evaluated (overflow): amount < 100" in reasons
    assert "rule positive_amount" not in str(reasons) and any("rule fine not kept" in r for r in reasons)


TYPED = {
    "qty": pa.array([7, 3600, 86400, 2**63 - 1], pa.int64()),
    "price": pa.array([0.5, 1.0, 2.0, None], pa.float64()),
    "amount": pa.array([Decimal("1.50"), Decimal("1.00"), Decimal("2.00"), None], pa.decimal128(12, 2)),
    "path": pa.array(["C:\\temp", "C:%", "a\\xb", "a_b"]),
}


def typed_rules(expect: dict[str, Any]) -> Rules:
    declared = parse_schema('{"columns": {"qty": "bigint", "price": "double", "amount": "decimal(12,2)"}}')
    compiled = compile_rules(rule_specs(parse_expect(json.dumps(expect))), declared, where="table 't'")
    assert compiled is not None
    return compiled


def test_numbers_keep_trinos_types_and_semantics() -> None:
    # Review of issue 47: literals were typed by the smallest integer that held them (24 * 60 * 60
    # wrapped in int8), an IN list by its first value (0.5 cut to 0), / always a double, and Arrow's
    # LIKE took a backslash as an escape, which Trino's LIKE without ESCAPE has not
    compiled = typed_rules(
        {
            "literal_arithmetic": "qty <= 24 * 60 * 60 AND 100 + 100 > 0",
            "in_doubles": "price IN (0, 0.5, 1)",
            "in_decimals": "amount IN (2, 1.5)",
            "integer_division": "qty / 2 = 3",  # bigint / bigint truncates, as Trino's does
            "decimal_beside_integers": "amount BETWEEN 1 AND 1.75",
            "backslash": "path LIKE 'C:\\%' OR path LIKE 'a\\_b'",  # Trino: \ is a character here
        }
    )
    assert failed(compiled, TYPED) == {
        "literal_arithmetic": [False, False, False, True],
        "in_doubles": [False, False, True, True],
        "in_decimals": [False, True, False, True],
        "integer_division": [False, True, True, True],
        "decimal_beside_integers": [False, False, True, True],
        "backslash": [False, True, False, True],
    }


def test_a_row_a_rule_cannot_be_evaluated_on_is_found_alone_and_the_others_are_judged() -> None:
    # qty + 1 overflows on the last row only (checked arithmetic: an error, as Trino's, not a wrap)
    compiled = typed_rules({"grows": {"sql": "qty + 1 > qty", "on_fail": "drop"}, "halves": "qty / (qty - 7) >= 0"})
    verdicts = {v.rule.name: v for v in compiled.evaluate(TYPED.get, 4)}
    grows, halves = verdicts["grows"], verdicts["halves"]
    assert grows.failed.tolist() == [False, False, False, True] and grows.errored is not None
    assert grows.errored.tolist() == [False, False, False, True] and "overflow" in grows.error
    assert grows.reason(3).startswith("rule grows could not be evaluated (")
    assert halves.errored is not None and halves.errored.tolist() == [True, False, False, False]  # 7 / 0
    # and a drop rule's row that raised is quarantined, never dropped
    from glue_processor.read.expect import check

    table = pa.table({f"k/{k}": v for k, v in TYPED.items()})
    checked = check(table, compiled, data_prefix="k/")
    assert checked.rows.tolist() == [0, 3] and checked.dropped == 0 and len(checked.kept) == 2


def test_a_rule_over_another_case_of_a_key_is_named_with_the_key_it_probably_means() -> None:
    compiled = rules({"has_user": "User_id IS NOT NULL", "line": "_line > 0", "fine": "amount > 0"})
    from glue_processor.shared.rules import misnamed

    assert misnamed(compiled, {"user_id", "amount", "id"}) == [("User_id", "user_id")]
    assert misnamed(compiled, {"User_id", "user_id"}) == []  # the key is there: nothing to say
    assert misnamed(compiled, set()) == []  # a table that knows no key yet
