"""Every line ends as exactly one row, one quarantine record, or a blank line, whatever keys are known.

Files mix valid objects with every kind of fault: invalid UTF-8 in a value or a key, two objects on
one line, trailing content, arrays and scalars, truncated and malformed JSON, lines of form feeds
or vertical tabs, blank lines, CRLF. Each line is judged by a reference (Python's ``json``) and the
parser must agree, line number by line number, with no keys known (a fresh task) and with every
key known (the steady state), and with room for one column only (other keys' values in ``_extra``).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from glue_processor.read import ndjson as T

KEYS = st.sampled_from(["a", "b", "name", "Name", "x y", "é", "k"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3), max_leaves=6
)
OBJECTS = st.dictionaries(KEYS, VALUES, max_size=4)


@st.composite
def good_line(draw: Any) -> bytes:
    obj = draw(OBJECTS)
    spaced = draw(st.booleans())
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()), separators=None if spaced else (",", ":"))
    return text.encode()


FAULTS = st.one_of(
    st.just(b'{"name":"Jos\xe9"}'),  # invalid UTF-8 in a value
    st.just(b'{"k\xe9y":1}'),  # invalid UTF-8 in a key
    st.just(b'{"a":1}{"a":2}'),  # two objects on one line
    st.just(b'{"a":1} junk'),
    st.just(b'{"a":1}]'),
    st.just(b'["",]'),
    st.just(b"[1,2]"),
    st.just(b"42"),
    st.just(b'"text"'),
    st.just(b'{"a":'),
    st.just(b'{"a":1,}'),
    st.just(b"\x0c"),
    st.just(b"\x0b"),
    st.just(b"{"),
)
BLANKS = st.sampled_from([b"", b" ", b"\t", b"  \t "])


def reference(line: bytes) -> str:
    """'row', 'bad' or 'blank', as Python's json judges the line (CR before LF removed)."""
    line = line.removesuffix(b"\r")
    if not line.strip(b" \t\r"):
        return "blank"
    try:
        obj = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "bad"
    return "row" if isinstance(obj, dict) else "bad"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(good_line(), FAULTS, BLANKS), min_size=1, max_size=12),
    st.booleans(),
    st.booleans(),
)
def test_every_line_is_a_row_a_quarantined_line_or_blank(lines: list[bytes], crlf: bool, final_newline: bool) -> None:
    data = (b"\r\n" if crlf else b"\n").join(lines) + ((b"\r\n" if crlf else b"\n") if final_newline else b"")
    want = {n: reference(line) for n, line in enumerate(data.split(b"\n"), 1)}
    want_rows = sorted(n for n, kind in want.items() if kind == "row")
    want_bad = sorted(n for n, kind in want.items() if kind == "bad")
    fresh = T.parse_ndjson(data)
    steady = T.parse_ndjson(data, fresh.keys)  # every key known
    spilled = T.parse_ndjson(data, room=1)  # keys past the first in _extra
    for parsed in (fresh, steady, spilled):
        rows = parsed.lines.to_pylist()
        bad = sorted(b.line for b in parsed.bad)
        assert rows == want_rows, (data, rows, want_rows)
        assert bad == want_bad, (data, parsed.bad, want_bad)
        assert len(rows) + len(bad) + sum(k == "blank" for k in want.values()) == len(want)


def test_a_blank_line_does_not_hide_two_objects_on_one_line() -> None:
    parsed = T.parse_ndjson(b'{"a":1}{"a":2}\n\n{"a":3}\n', ("a",))
    assert parsed.lines.to_pylist() == [3]
    assert [(b.line, b.reason) for b in parsed.bad] == [(1, T.REASON_TRAILING)]
