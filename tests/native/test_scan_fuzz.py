"""ndjson_arrow.scan against an independent pure-Python reference (differential, hypothesis-driven).

The reference (``_judge``/``_reference``) implements the contract of ``ndjson_arrow/__init__.py``
directly: strict RFC 8259 per line, strict UTF-8, no lone surrogate escapes, MAX_DEPTH levels,
values as the contract says, last duplicate wins, keys past ``room`` in ``extra``, bad lines leave
nothing behind. Reason codes follow a left-to-right reading (first error wins).
"""

from __future__ import annotations

import json
import random
from typing import Any

import ndjson_arrow
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glue_processor.read import ndjson as T
from glue_processor.shared import names

MAX_DEPTH = ndjson_arrow.MAX_DEPTH
WS = frozenset(b" \t\r\n")
HEXD = frozenset(b"0123456789abcdefABCDEF")
DIGITS = frozenset(b"0123456789")
SIMPLE = {ord(k): v for k, v in zip('"\\/bfnrt', [b'"', b"\\", b"/", b"\b", b"\f", b"\n", b"\r", b"\t"], strict=True)}


class _Bad(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _skip(b: bytes, i: int) -> int:
    while i < len(b) and b[i] in WS:
        i += 1
    return i


def _hex4(b: bytes, i: int) -> int:
    h = b[i : i + 4]
    if len(h) != 4 or not all(x in HEXD for x in h):
        raise _Bad(ndjson_arrow.MALFORMED)
    return int(h, 16)


def _string(b: bytes, i: int) -> tuple[int, bytes]:
    out = bytearray()
    while True:
        if i >= len(b):
            raise _Bad(ndjson_arrow.MALFORMED)
        c = b[i]
        if c == 0x22:
            return i + 1, bytes(out)
        if c < 0x20:
            raise _Bad(ndjson_arrow.MALFORMED)
        if c != 0x5C:
            out.append(c)
            i += 1
            continue
        e = b[i + 1] if i + 1 < len(b) else -1
        if e in SIMPLE:
            out += SIMPLE[e]
            i += 2
        elif e == ord("u"):
            cp = _hex4(b, i + 2)
            i += 6
            if 0xD800 <= cp <= 0xDBFF:  # a high surrogate: a low one must follow
                if b[i : i + 2] != b"\\u":
                    raise _Bad(ndjson_arrow.SURROGATE)
                lo = _hex4(b, i + 2)
                if not 0xDC00 <= lo <= 0xDFFF:
                    raise _Bad(ndjson_arrow.SURROGATE)
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                i += 6
            elif 0xDC00 <= cp <= 0xDFFF:
                raise _Bad(ndjson_arrow.SURROGATE)
            out += chr(cp).encode()
        else:
            raise _Bad(ndjson_arrow.MALFORMED)


def _number(b: bytes, i: int) -> int:
    n = len(b)
    if i < n and b[i] == 0x2D:
        i += 1
    if i < n and b[i] == 0x30:
        i += 1
    elif i < n and 0x31 <= b[i] <= 0x39:
        while i < n and b[i] in DIGITS:
            i += 1
    else:
        raise _Bad(ndjson_arrow.MALFORMED)
    for lead, sign in ((b".", False), (b"eE", True)):
        if i < n and b[i] in lead:
            i += 1
            if sign and i < n and b[i] in b"+-":
                i += 1
            if i >= n or b[i] not in DIGITS:
                raise _Bad(ndjson_arrow.MALFORMED)
            while i < n and b[i] in DIGITS:
                i += 1
    return i


def _compact(raw: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(raw):
        c = raw[i]
        if c == 0x22:
            j = i + 1
            while raw[j] != 0x22:
                j += 2 if raw[j] == 0x5C else 1
            out += raw[i : j + 1]
            i = j + 1
        else:
            if c not in WS:
                out.append(c)
            i += 1
    return bytes(out)


def _value(b: bytes, i: int, depth: int) -> tuple[int, bytes | None]:
    """One value at i with ``depth`` containers open around it: (end, its column bytes or None)."""
    start, stack, state, got = i, [], "value", None
    while True:
        if state == "value":
            if i >= len(b):
                raise _Bad(ndjson_arrow.MALFORMED)
            c = b[i]
            if c in b"{[":
                if depth + len(stack) >= MAX_DEPTH:
                    raise _Bad(ndjson_arrow.TOO_DEEP)
                stack.append(c)
                i = _skip(b, i + 1)
                if i < len(b) and b[i] == c + 2:  # } is { + 2, ] is [ + 2
                    i += 1
                    stack.pop()
                    state = "after"
                elif c == 0x7B:
                    state = "member"
                continue
            if c == 0x22:
                i, got = _string(b, i + 1)
            else:
                for lit in (b"true", b"false", b"null"):
                    if b.startswith(lit, i):
                        i, got = i + len(lit), (None if lit == b"null" else lit)
                        break
                else:
                    j = _number(b, i)
                    i, got = j, b[i:j]
            state = "after"
        elif state == "after":
            if not stack:
                return i, (_compact(b[start:i]) if b[start] in b"{[" else got)
            i = _skip(b, i)
            if i < len(b) and b[i] == 0x2C:
                i = _skip(b, i + 1)
                state = "member" if stack[-1] == 0x7B else "value"
            elif i < len(b) and b[i] == stack[-1] + 2:
                i += 1
                stack.pop()
            else:
                raise _Bad(ndjson_arrow.MALFORMED)
        else:  # member
            if i >= len(b) or b[i] != 0x22:
                raise _Bad(ndjson_arrow.MALFORMED)
            i = _skip(b, _string(b, i + 1)[0])
            if i >= len(b) or b[i] != 0x3A:
                raise _Bad(ndjson_arrow.MALFORMED)
            i = _skip(b, i + 1)
            state = "value"


def _judge(line: bytes) -> tuple[str, Any]:
    """('blank', None), ('bad', reason) or ('row', [(key, value bytes or None), ...])."""
    if all(c in b" \t\r" for c in line):
        return "blank", None
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return "bad", ndjson_arrow.NOT_UTF8
    i = _skip(line, 0)
    try:
        if line[i] != 0x7B:
            first = line[i]
            i, _ = _value(line, i, 0)
            if _skip(line, i) < len(line):
                return "bad", ndjson_arrow.TRAILING
            return "bad", ndjson_arrow.ARRAY if first == 0x5B else ndjson_arrow.SCALAR
        members = []
        i = _skip(line, i + 1)
        if i < len(line) and line[i] == 0x7D:
            i += 1
        else:
            while True:
                if i >= len(line) or line[i] != 0x22:
                    raise _Bad(ndjson_arrow.MALFORMED)
                i, key = _string(line, i + 1)
                i = _skip(line, i)
                if i >= len(line) or line[i] != 0x3A:
                    raise _Bad(ndjson_arrow.MALFORMED)
                i, value = _value(line, _skip(line, i + 1), 1)
                members.append((key, value))
                i = _skip(line, i)
                if i < len(line) and line[i] == 0x2C:
                    i = _skip(line, i + 1)
                elif i < len(line) and line[i] == 0x7D:
                    i += 1
                    break
                else:
                    raise _Bad(ndjson_arrow.MALFORMED)
        if _skip(line, i) < len(line):
            return "bad", ndjson_arrow.TRAILING
        return "row", members
    except _Bad as e:
        return "bad", e.code


def _reference(data: bytes, known: list[str], room: int) -> dict[str, Any]:
    pieces = data.split(b"\n")
    if data.endswith(b"\n"):
        pieces.pop()
    kinds = {k.encode(): "dense" for k in known}
    new_keys: list[bytes] = []
    rows, bad, pos = [], [], 0
    for number, line in enumerate(pieces, 1):
        start, pos = pos, pos + len(line) + 1
        kind, what = _judge(line)
        if kind == "bad":
            bad.append((number, what, start, start + len(line)))
        if kind != "row":
            continue
        dense: dict[bytes, bytes | None] = {}
        spilled: dict[bytes, bytes | None] = {}
        for key, value in what:
            if key not in kinds:
                kinds[key] = "dense" if len(new_keys) < room else "spilled"
                if kinds[key] == "dense":
                    new_keys.append(key)
            if kinds[key] == "dense":
                dense[key] = value
            elif key in spilled or value is not None:
                spilled[key] = value
        for key in [k for k in dense if k in new_keys and not names.nameable(k.decode())]:
            value = dense.pop(key)  # a key that cannot name a column: its value goes to extra
            if value is not None:
                spilled[key] = value
        rows.append((number, dense, sorted((k, v) for k, v in spilled.items() if v is not None) or None))
    new_keys = [k for k in new_keys if names.nameable(k.decode())]
    keys = [k.encode() for k in known] + new_keys
    return {
        "new_keys": [k.decode() for k in new_keys],
        "columns": [[r[1].get(k) for r in rows] for k in keys],
        "lines": [r[0] for r in rows],
        "bad": bad,
        "extra": [r[2] for r in rows],
    }


def _actual(data: bytes, known: list[str], room: int) -> dict[str, Any]:
    parsed = T.parse_ndjson(data, known, room=room)
    for array in (*parsed.columns, parsed.lines, *([] if parsed.extra is None else [parsed.extra])):
        array.validate(full=True)
    raw_bad = ndjson_arrow.scan(data, known, room)[4]
    extra = [None] * parsed.rows if parsed.extra is None else parsed.extra.to_pylist()
    return {
        "new_keys": list(parsed.keys[len(known) :]),
        "columns": [[None if v is None else v.encode() for v in c.to_pylist()] for c in parsed.columns],
        "lines": parsed.lines.to_pylist(),
        "bad": [tuple(b) for b in raw_bad],
        "extra": [None if e is None else sorted((k.encode(), v.encode()) for k, v in e) for e in extra],
    }


def _check(data: bytes, known: list[str], room: int) -> None:
    want, got = _reference(data, known, room), _actual(data, known, room)
    assert got == want, (data, known, room)


# -- examples --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "known"),
    [
        (b'{"a":1}\n{"a":[1,2\n{"a":3}', []),  # a partly written nested value of a seen key
        (b'{"a":[1\n{"a":2}', ["a"]),  # the same for a known key
        (b'{"a":"x\\ty\n{"a":"z"}', ["a"]),  # a string with an escape, cut short
        (b'{"a":1,"a":{"b":2\n{"a":3}', ["a"]),  # a repeated key whose second value is cut short
    ],
)
def test_a_bad_line_leaves_no_bytes_in_a_column(data: bytes, known: list[str]) -> None:
    for room in (0, 1, 100):
        _check(data, known, room)
    assert T.parse_ndjson(data, known).columns[0].to_pylist()[-1] in ("3", "2", "z")


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":"x","b":""}\n',  # spilled values all empty: no extra bytes at all (a NULL buffer, make sanitize)
        b'{"a":"x","b":"","c":""}\n{"a":"y"}\n',
        b'{"b":""}\n{"a":"x","b":"y"}\n',
    ],
)
def test_empty_spilled_values(data: bytes) -> None:
    _check(data, [], 1)


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
def test_depth_limit(depth: int) -> None:
    lines = [
        "[" * depth + "]" * depth,
        '{"a":' * depth + "1" + "}" * depth,
        '{"z":' + "[" * (depth - 1) + "]" * (depth - 1) + "}",
    ]
    _check("\n".join(lines).encode(), ["z"], 1)


# -- generated -------------------------------------------------------------------------------
KEYS = st.sampled_from(["a", "b", "", "é", "x y", "k\n", "\u2028", "😀", "c"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**25), 10**25),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=6),
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3), max_leaves=8
)
JUNK = [
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b",",
    b":",
    b"\\",
    b" ",
    b"\r",
    b"0",
    b"e",
    b".",
    b"-",
    b"\x00",
    b"\x80",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"NaN",
    b"Infinity",
    b"nul",
    b"\x0c",
]


@st.composite
def lines(draw: Any) -> bytes:
    pairs = draw(st.lists(st.tuples(KEYS, VALUES), max_size=5))  # repeated keys allowed
    pad = draw(st.sampled_from(["", " ", "\t", "\r", " \r\t"]))
    ascii_only = draw(st.booleans())
    separators = (pad + "," + pad, pad + ":" + pad)

    def text(v: Any) -> str:
        return json.dumps(v, ensure_ascii=ascii_only, separators=separators)

    body = ",".join(f"{pad}{text(k)}{pad}:{pad}{text(v)}" for k, v in pairs)
    line = f"{pad}{{{body}}}{pad}".encode()
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(line)))
        line = line[:at] if draw(st.booleans()) else line[:at] + draw(st.sampled_from(JUNK)) + line[at:]
    return line


@settings(max_examples=400, deadline=None)
@given(
    st.lists(lines() | st.sampled_from([b"", b" \r", b"[1]", b'"s"', b"{} {}"]), min_size=1, max_size=10),
    st.booleans(),
    st.lists(KEYS, max_size=4, unique=True),
    st.sampled_from([0, 1, 2, 10**6]),
)
def test_scan_matches_the_reference(found: list[bytes], final_newline: bool, known: list[str], room: int) -> None:
    _check(b"\n".join(found) + (b"\n" if final_newline else b""), known, room)


def test_keys_a_bad_line_added_leave_the_table_as_it_was() -> None:
    # Given 1,000 known keys (a table that grew several times) and bad lines that each add new keys
    known = [f"k{i}" for i in range(1000)]
    bad = b"".join(b'{"new%d":1,"k%d":2,"more%d":[' % (i, i, i) + b"\n" for i in range(300))
    good = b'{"k999":"last","k0":"first","fresh":1,"spill":2}\n'
    new, columns, _, rows, bad_lines, extra, *_ = ndjson_arrow.scan(bad + good, known, 1)
    # Then every bad line is bad, the keys they added are gone (room for one new key is intact),
    # and the known keys are still found where the table had them
    assert len(bad_lines) == 300 and rows == 1
    assert new == ["fresh"]
    values = {k: c for k, c in zip([*known, *new], columns, strict=True) if c is not None}
    assert {k: bytes(c[1]) for k, c in values.items()} == {"k999": b"last", "k0": b"first", "fresh": b"1"}
    assert extra is not None and bytes(extra[4]) == b"spill" and bytes(extra[6]) == b"2"


def test_names_that_share_a_quick_slot_are_told_apart() -> None:
    # Given names the scanner's first lookup cannot tell apart (scan_core.h, recent_slot: the same
    # length and the same first and last eight bytes, so the same slot), names of every length up
    # to 20 (the slot reads them in overlapping words), in shuffled orders that defeat the
    # prediction of the next key, with lines that fail after adding names, room for some columns
    rng = random.Random(11)
    alike = [f"prefix__{i:03d}__suffix" for i in range(40)] + [f"prefix__{i:04d}__suffix" for i in range(20)]
    short = [
        "",
        *("abcdefghijklmnopqrst"[:n] for n in range(1, 21)),
        *("tsrqponmlkjihgfedcba"[:n] for n in range(1, 21)),
    ]
    # and names of the same slots seen only in lines that fail, whose keys the scan frees, so the
    # slot is left naming a key that is gone (under make sanitize, a read of it is reported)
    gone = [f"prefix__{i:03d}__suffix" for i in range(40, 99)] + [f"prefix__{i:04d}__suffix" for i in range(20, 60)]
    pool = alike + short
    lines = []
    for i in range(400):
        keys = rng.sample(pool, rng.randint(1, 12))
        if i % 7 == 0:
            keys += rng.sample(gone, 3)
        body = ",".join(f"{json.dumps(k)}:{i if j % 2 else json.dumps(k)}" for j, k in enumerate(keys))
        lines.append(("{" + body + "}" if i % 7 else "{" + body + ",[").encode())
    data = b"\n".join(lines) + b"\n"
    # Then each value is in its own name's column or entry, as the reference reads them
    for known, room in (([], 10), ([], 10**6), (alike[:5], 3)):
        _check(data, known, room)


@pytest.mark.parametrize("tail", [b"", b"\n", b'\n{"a":1}\n', b"\n" + b"9" * 20])
def test_every_byte_after_a_run_of_digits(tail: bytes) -> None:
    # Given numbers whose digit runs (of 1 to 20 digits, in the integer part and the fraction) end
    # at each of the 256 byte values, at the end of the line, one byte from it, or with the
    # buffer's end right after the line (the scanner reads digits eight bytes at a time, up to the
    # buffer's end and past the line's: scan_core.h, skip_digits)
    lines = []
    for digits in range(1, 21):
        run = b"1234567890" * 2
        for byte in range(256):
            stop = bytes([byte])
            lines += [b'{"a":' + run[:digits] + stop, b'{"a":' + run[:digits] + stop + b"}"]
            lines += [b'{"a":0.' + run[:digits] + stop + b"}", b'{"a":-' + run[:digits] + b"e" + stop + b"1}"]
    for line in lines:
        if b"\n" in line:
            continue
        # Then each reads as the reference reads it: the same value, or the same bad line
        _check(line + tail, ["a"], 0)
