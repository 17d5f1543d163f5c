"""The NDJSON parser: bytes in, string columns and bad lines out (no Spark needed)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glue_processor.read import ndjson as T
from glue_processor.shared import names


def rows_of(parsed: T.ParsedText) -> dict[int, dict[str, Any]]:
    """line -> {key: value} of the non-null values of each row (its columns', and its extra's)."""
    out: dict[int, dict[str, Any]] = {}
    columns = [c.to_pylist() for c in parsed.columns]
    extra = [None] * parsed.rows if parsed.extra is None else parsed.extra.to_pylist()
    for i, line in enumerate(parsed.lines.to_pylist()):
        out[line] = {k: col[i] for k, col in zip(parsed.keys, columns, strict=True) if col[i] is not None}
        out[line].update(dict(extra[i] or []))
    return out


def test_lines_are_numbered_and_blank_lines_skipped() -> None:
    # Given LF and CRLF endings and blank lines
    parsed = T.parse_ndjson(b'{"a":1}\r\n\n  \n{"b":2}\n')
    # Then rows keep their 1-based line numbers and blank lines are neither rows nor bad lines
    assert rows_of(parsed) == {1: {"a": "1"}, 4: {"b": "2"}}
    assert parsed.bad == []


def test_fields_are_strings_and_nested_values_compact_json_text() -> None:
    line = (
        b'{"s":"x","i":12345678901234567890,"f":1.50,"e":1e400,"b":true,"n":null,'
        b'"o":{"k": [1, "2 3"]},"a":[1,2],"u":"caf\\u00e9 \\"q\\"","z":""}'
    )
    (row,) = rows_of(T.parse_ndjson(line)).values()
    assert row == {
        "s": "x",
        "i": "12345678901234567890",  # numbers keep their literal, however long
        "f": "1.50",
        "e": "1e400",
        "b": "true",
        "o": '{"k":[1,"2 3"]}',  # white space outside strings removed, inside kept
        "a": "[1,2]",
        "u": 'café "q"',  # escapes decoded in top-level strings
        "z": "",
    }


def test_a_surrogate_pair_is_one_character() -> None:
    (row,) = rows_of(T.parse_ndjson(b'{"e":"\\ud83d\\ude00","k\\ud83d\\ude00":"x"}')).values()
    assert row == {"e": "\U0001f600", "k\U0001f600": "x"}


def test_duplicate_keys_last_wins_and_case_variants_kept() -> None:
    (row,) = rows_of(T.parse_ndjson(b'{"a":1,"a":2,"A":3}', ["a"])).values()
    assert row == {"a": "2", "A": "3"}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"[1,2]", T.REASON_ARRAY),
        (b"42", T.REASON_SCALAR),
        (b'"text"', T.REASON_SCALAR),
        (b"{bad", T.REASON_MALFORMED),
        (b'{"a":"\xff"}', T.REASON_NOT_UTF8),
        (b'{"a":{"b":"\xc3"}}', T.REASON_NOT_UTF8),
        (b'{"a":' * 10_500 + b"1" + b"}" * 10_500, T.REASON_TOO_DEEP),
        # a lone surrogate (what JSON.stringify writes for a cut emoji): in a value, nested, in a key
        (b'{"name":"caf\\ud83d"}', T.REASON_SURROGATE),
        (b'{"name":"\\ud83d\\u0041"}', T.REASON_SURROGATE),
        (b'{"a":{"b":["\\udc00"]}}', T.REASON_SURROGATE),
        (b'{"\\ud800k":1}', T.REASON_SURROGATE),
        (b'{"a":"\\ud83d\\uzzzz"}', T.REASON_MALFORMED),
    ],
)
def test_rejected_lines_carry_a_reason(line: bytes, reason: str) -> None:
    parsed = T.parse_ndjson(b'{"ok":1}\n' + line + b"\r\n")
    (bad,) = parsed.bad
    assert (bad.line, bad.reason, bad.raw) == (2, reason, line.decode("utf-8", errors="replace"))
    assert rows_of(parsed) == {1: {"ok": "1"}}


@pytest.mark.parametrize(
    "line",
    [
        b'{"a":1} junk',
        b'{"a":1}{"b":2}',
        b'{"a":1},{"b":2}',
        b'{"a":1}]',
        b'{"a":1} {"b":2}',
        b'{"a":1}  {"b":2}',
        b'{"a":1}\t{"b":2}',
    ],
)
def test_trailing_content_after_one_object_is_rejected(line: bytes) -> None:
    (bad,) = T.parse_ndjson(line + b"\n", ["a"]).bad
    assert (bad.raw, bad.reason) == (line.decode(), T.REASON_TRAILING)


def test_a_genuine_replacement_character_is_data() -> None:
    (row,) = rows_of(T.parse_ndjson('{"a":"\ufffd"}'.encode())).values()
    assert row == {"a": "\ufffd"}


def test_new_keys_widen_the_columns_and_keep_line_order() -> None:
    # Given a known key "a" and rows that bring "b" (one of them with a repeated key)
    parsed = T.parse_ndjson(b'{"a":1}\n{"b":1,"a":2}\n{"a":1,"a":3}\n{}\nnope\n{"b":"x","b":"y"}\n', ["a"])
    # Then the new key comes after the known ones, and rows stay in line order
    assert parsed.keys == ("a", "b")
    assert parsed.lines.to_pylist() == [1, 2, 3, 4, 6]
    assert rows_of(parsed) == {1: {"a": "1"}, 2: {"a": "2", "b": "1"}, 3: {"a": "3"}, 4: {}, 6: {"b": "y"}}


def test_another_case_of_a_column_the_table_has_goes_to_extra() -> None:
    # Given a table with a column "kind", and lines with "Kind" (and a key new to both)
    parsed = T.parse_ndjson(b'{"kind":"a"}\n{"Kind":"B","New":1}\n', ["kind"], taken=frozenset({"kind"}))
    # Then "Kind" is no column (it would rename kind's), its value is in _extra under its own key
    assert parsed.keys == ("kind", "New")
    assert rows_of(parsed) == {1: {"kind": "a"}, 2: {"New": "1", "Kind": "B"}}
    assert parsed.extra is not None and parsed.extra.to_pylist() == [None, [("Kind", "B")]]


def test_another_case_of_a_known_key_s_column_name_goes_to_extra_too() -> None:
    from glue_processor.shared.spec import TaskSpec

    # Given known keys "Kind" and "kind", whose columns are Kind and kind__2
    known = ("Kind", "kind")
    spec = TaskSpec(0, (), known, "file:///d", "file:///q", 0, datetime.now(UTC), 1)
    assert dict(names.column_names(known)) == {"Kind": "Kind", "kind": "kind__2"}
    # When a line brings "KIND__2" (which sorts first and would take kind__2, renaming kind's column)
    parsed = T.parse_ndjson(b'{"kind":"a","KIND__2":"b"}\n', list(known), taken=spec.taken)
    # Then it is no column: its value is in _extra, and the known keys keep their names
    assert parsed.keys == known
    assert parsed.extra is not None and parsed.extra.to_pylist() == [[("KIND__2", "b")]]


def test_a_key_held_for_a_share_set_aside_is_a_column_as_it_is_and_no_other_case_of_it() -> None:
    from glue_processor.shared.spec import TaskSpec

    # Given a share set aside that will add "kind" (held), and a table that knows "u"
    spec = TaskSpec(0, (), ("u",), "file:///d", "file:///q", 0, datetime.now(UTC), 1, held=("kind",))
    # When lines bring "Kind" and "kind" (each new to this batch)
    lines = b'{"u":"a","Kind":"y"}\n{"u":"b","kind":"z"}\n'
    parsed = T.parse_ndjson(lines, ["u"], taken=spec.taken, exact=spec.exact)
    # Then "kind" is a column, the one the share set aside adds; "Kind" is in _extra
    assert parsed.keys == ("u", "kind")
    assert rows_of(parsed) == {1: {"u": "a", "Kind": "y"}, 2: {"u": "b", "kind": "z"}}
    assert parsed.extra is not None and parsed.extra.to_pylist() == [[("Kind", "y")], None]


def test_a_held_key_whose_column_has_a_suffix_is_no_column_of_a_later_share() -> None:
    from glue_processor.shared.spec import TaskSpec

    # Given a share set aside that brought "Kind" and "kind" (columns Kind and kind__2)
    spec = TaskSpec(0, (), (), "file:///d", "file:///q", 0, datetime.now(UTC), 1, held=("Kind", "kind"))
    # When a later batch brings "kind" alone (it would be named kind, next to the table's Kind)
    parsed = T.parse_ndjson(b'{"kind":"z","Kind":"y"}\n', [], taken=spec.taken, exact=spec.exact)
    # Then only "Kind", named as its key, is a column; "kind" is in _extra
    assert spec.exact == {"Kind"} and parsed.keys == ("Kind",)
    assert parsed.extra is not None and parsed.extra.to_pylist() == [[("kind", "z")]]


def test_deep_nesting_within_the_limit_is_kept_as_text() -> None:
    deep = "{" + '"a":{' * 2000 + '"z":1' + "}" * 2001
    (row,) = rows_of(T.parse_ndjson(deep.encode())).values()
    assert row["a"] == deep[len('{"a":') : -1]


def test_column_names_are_unique_case_insensitively() -> None:
    mapping = dict(names.column_names(["a", "A", "_line", "", "b"]))
    assert mapping == {"A": "A", "a": "a__2", "_line": "_line__2", "": "_empty_key", "b": "b"}
    lowered = {v.lower() for v in mapping.values()} | {c.lower() for c in names.LINEAGE_COLUMNS}
    assert len(lowered) == len(mapping) + len(names.LINEAGE_COLUMNS)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=5), max_size=6), st.booleans())
def test_any_objects_round_trip(records: list[dict[str, Any]], ascii_only: bool) -> None:
    # Given objects as a producer would write them (escaped or not, spaced or not)
    rng = random.Random(len(records))
    text = "".join(
        json.dumps(r, ensure_ascii=ascii_only, separators=rng.choice([(",", ":"), (", ", ": ")])) + "\n"
        for r in records
    )
    parsed = T.parse_ndjson(text.encode(), ["x"])
    # Then each value reads back as the same JSON value (strings as themselves)
    got = rows_of(parsed)
    assert parsed.bad == []
    assert sorted(got) == list(range(1, len(records) + 1))
    for line, record in enumerate(records, 1):
        expected = {k: v for k, v in record.items() if v is not None}
        assert set(got[line]) == set(expected)
        for key, value in expected.items():
            assert (got[line][key] if isinstance(value, str) else json.loads(got[line][key])) == value
    # And once every key is known (the one-call path for clean files), the rows are the same
    assert rows_of(T.parse_ndjson(text.encode(), sorted({k for r in records for k in r}))) == got


tricky_text = st.text(alphabet=st.sampled_from(['"', "\\", " ", "\t", ",", ":", "{", "]", "a", "é", "\n"]), max_size=8)
nested_values = st.recursive(
    st.none() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=10,
).filter(lambda v: isinstance(v, list | dict))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.dictionaries(st.sampled_from(["a", "b", "c"]), nested_values, min_size=1, max_size=3), max_size=6),
    st.sampled_from([(", ", ": "), (" , ", " : "), ("\t,\t", "\t:\t"), (",  ", ":")]),
    st.booleans(),
)
def test_nested_values_are_exactly_their_compact_text(
    records: list[dict[str, Any]], separators: tuple[str, str], ascii_only: bool
) -> None:
    # Given nested values written with white space between tokens, and strings full of quotes,
    # backslashes, white space and brackets
    text = "".join(json.dumps(r, ensure_ascii=ascii_only, separators=separators) + "\n" for r in records)
    for known in ([], ["a", "b", "c"]):  # the fresh path and the known-keys path
        got = rows_of(T.parse_ndjson(text.encode(), known))
        # Then each is the compact text of what was written: white space outside strings gone, the rest as is
        for line, record in enumerate(records, 1):
            expected = {k: json.dumps(v, ensure_ascii=ascii_only, separators=(",", ":")) for k, v in record.items()}
            assert got.get(line, {}) == expected


POOL = [f"k{i:03d}" for i in range(120)] + ["Dup", "dup", 'q"uote', ""]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.dictionaries(st.sampled_from(POOL), json_values, max_size=8), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=len(POOL)),
    st.booleans(),
)
def test_sparse_rows_over_many_known_keys_read_back_the_same(
    records: list[dict[str, Any]], known_count: int, spaced: bool
) -> None:
    # Given many known keys (the sparse path's case), rows holding few of them, some keys still new
    separators = (", ", ": ") if spaced else (",", ":")
    text = "".join(json.dumps(r, separators=separators) + "\n" for r in records)
    known = POOL[:known_count]
    parsed = T.parse_ndjson(text.encode(), known)
    # Then the rows are those the reference decoder reads, whichever path ran, and every key is a column
    got = rows_of(parsed)
    assert parsed.bad == [] and sorted(got) == list(range(1, len(records) + 1))
    assert set(parsed.keys) >= set(known) | {k for r in records for k in r}
    for line, record in enumerate(records, 1):
        expected = {k: v for k, v in record.items() if v is not None}
        assert set(got[line]) == set(expected)
        for key, value in expected.items():
            assert (got[line][key] if isinstance(value, str) else json.loads(got[line][key])) == value


def test_keys_past_the_room_go_to_extra_with_the_same_value_semantics() -> None:
    # Given room for one new key, and lines with three (one repeated, one null)
    data = b'{"a":1,"b":"x\\u00e9","c":{ "d" : [1, 2] }}\n{"c":"first","c":null}\n{"c":1,"c":2,"b":null}\n'
    parsed = T.parse_ndjson(data, ["a"], room=1)
    # Then "b" (first seen) is a column, "c" is in extra: unescaped, compact, last value wins, null not kept
    assert parsed.keys == ("a", "b")
    assert rows_of(parsed) == {1: {"a": "1", "b": "x\u00e9", "c": '{"d":[1,2]}'}, 2: {}, 3: {"c": "2"}}
    assert parsed.extra is not None
    assert parsed.extra.to_pylist() == [[("c", '{"d":[1,2]}')], None, [("c", "2")]]
    assert parsed.extra_values == 2


def test_a_bad_line_leaves_nothing_behind_not_even_its_keys() -> None:
    # Given lines that introduce keys and then fail (after the object, inside a value, in a key)
    data = b'{"new":1,"x":2} junk\n{"other":[1,}\n{"a":1}\n{"late":"ok","\xff":1}\n'
    parsed = T.parse_ndjson(data, [], room=1)
    # Then only the good line counts: its key took the one place, and nothing else is a key or a value
    assert parsed.keys == ("a",)
    assert rows_of(parsed) == {3: {"a": "1"}}
    assert parsed.extra is None
    assert [(b.line, b.reason) for b in parsed.bad] == [
        (1, T.REASON_TRAILING),
        (2, T.REASON_MALFORMED),
        (4, T.REASON_NOT_UTF8),
    ]


def test_known_keys_keep_their_order_and_are_null_where_absent() -> None:
    parsed = T.parse_ndjson(b'{"b":1,"z":2}\n', ["b", "a"])
    assert parsed.keys == ("b", "a", "z")
    assert [c.to_pylist() for c in parsed.columns] == [["1"], [None], ["2"]]


def test_lone_surrogate_escapes_are_refused_anywhere_with_their_reason() -> None:
    lines = [b'{"a":"\\ud800"}', b'{"a":{"b":"\\udc00"}}', b'{"\\ud800":1}', b'{"a":"\\ud83d\\ude00"}']
    parsed = T.parse_ndjson(b"\n".join(lines))
    assert [(b.line, b.reason) for b in parsed.bad] == [(n, T.REASON_SURROGATE) for n in (1, 2, 3)]
    assert rows_of(parsed) == {4: {"a": "\U0001f600"}}
