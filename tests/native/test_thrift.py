"""The native compact-protocol codec against a pure-Python reference (differential, hypothesis-driven),
and on the footers Arrow writes.

The reference follows the Thrift compact protocol specification
(https://github.com/apache/thrift/blob/master/doc/specs/thrift-compact-protocol.md): field headers
with a 4-bit id delta or a zigzag id, zigzag varint integers, little-endian doubles, varint-length
binaries, list/set headers with a 4-bit size (15: varint size follows), maps with a varint size and
one key/value type byte, bools in a struct's field header and as one byte inside containers.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glue_processor.write import thrift
from glue_processor.write.thrift import (
    BINARY,
    BYTE,
    DOUBLE,
    FALSE,
    I16,
    I32,
    I64,
    LIST,
    MAP,
    SET,
    STRUCT,
    TRUE,
    Field,
)


# -- the reference ------------------------------------------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def ref_value(type_: int, v: Any) -> bytes:
    if type_ in (TRUE, FALSE):
        return bytes([TRUE if v else FALSE])
    if type_ == BYTE:
        return struct.pack("b", v)
    if type_ in (I16, I32, I64):
        return _zigzag(v)
    if type_ == DOUBLE:
        return struct.pack("<d", v)
    if type_ == BINARY:
        return _varint(len(v)) + v
    if type_ in (LIST, SET):
        elem, items = v
        head = bytes([(len(items) << 4) | elem]) if len(items) < 15 else bytes([0xF0 | elem]) + _varint(len(items))
        return head + b"".join(ref_value(elem, i) for i in items)
    if type_ == MAP:
        kv, pairs = v
        body = b"".join(ref_value(kv >> 4, k) + ref_value(kv & 0x0F, x) for k, x in pairs)
        return _varint(len(pairs)) + (bytes([kv]) if pairs else b"") + body
    assert type_ == STRUCT
    return ref_struct(v)


def ref_struct(fields: list[Field]) -> bytes:
    out, last = bytearray(), 0
    for f in fields:
        wire = (TRUE if f.value else FALSE) if f.type in (TRUE, FALSE) else f.type
        delta = f.id - last
        out += bytes([(delta << 4) | wire]) if 0 < delta <= 15 else bytes([wire]) + _zigzag(f.id)
        if wire not in (TRUE, FALSE):
            out += ref_value(wire, f.value)
        last = f.id
    return bytes(out + b"\x00")


# -- values of every type ------------------------------------------------------------------------
_INTS = {BYTE: (-128, 127), I16: (-(2**15), 2**15 - 1), I32: (-(2**31), 2**31 - 1), I64: (-(2**63), 2**63 - 1)}


def _scalar(type_: int) -> st.SearchStrategy[Any]:
    if type_ in _INTS:
        lo, hi = _INTS[type_]
        return st.integers(lo, hi)
    if type_ == DOUBLE:
        return st.floats(allow_nan=False)
    if type_ == BINARY:
        return st.binary(max_size=40)
    return st.booleans()


_SCALARS = [TRUE, BYTE, I16, I32, I64, DOUBLE, BINARY]


def _values(depth: int) -> st.SearchStrategy[tuple[int, Any]]:
    scalar = st.sampled_from(_SCALARS).flatmap(lambda t: st.tuples(st.just(t), _scalar(t)))
    if depth == 0:
        return scalar
    lists = st.sampled_from([LIST, SET]).flatmap(
        lambda kind: st.sampled_from(_SCALARS).flatmap(
            lambda elem: st.tuples(st.just(kind), st.tuples(st.just(elem), st.lists(_scalar(elem), max_size=20)))
        )
    )
    maps = st.tuples(st.sampled_from([I32, BINARY]), st.sampled_from(_SCALARS)).flatmap(
        lambda kv: st.tuples(
            st.just(MAP),
            # an empty map carries no key/value types: it reads back as (0, [])
            st.lists(st.tuples(_scalar(kv[0]), _scalar(kv[1])), max_size=5).map(
                lambda pairs, kv=kv: ((kv[0] << 4) | kv[1] if pairs else 0, pairs)
            ),
        )
    )
    structs_in_list = st.tuples(st.just(LIST), st.tuples(st.just(STRUCT), st.lists(_structs(depth - 1), max_size=3)))
    return st.one_of(scalar, lists, maps, structs_in_list, st.tuples(st.just(STRUCT), _structs(depth - 1)))


def _bool_type(type_: int, value: Any) -> int:
    # a struct's bool field is read back with the type its value is written as
    return (TRUE if value else FALSE) if type_ in (TRUE, FALSE) else type_


def _structs(depth: int) -> st.SearchStrategy[list[Field]]:
    ids = st.lists(st.integers(-5, 40), max_size=8)  # short and long id deltas, also backwards
    return ids.flatmap(
        lambda fids: st.tuples(*[_values(depth) for _ in fids]).map(
            lambda typed, fids=fids: [Field(fid, _bool_type(t, v), v) for fid, (t, v) in zip(fids, typed, strict=True)]
        )
    )


@settings(max_examples=120, deadline=None)
@given(_structs(3))
def test_encode_matches_the_reference_and_decodes_back(fields: list[Field]) -> None:
    data = thrift.encode(fields)
    assert data == ref_struct(fields)
    assert thrift.decode(data) == fields


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_fail_cleanly(data: bytes) -> None:
    try:
        fields = thrift.decode(data)
    except thrift.ThriftError:
        return
    # what decodes encodes, and reads back the same (compared as bytes: a NaN double is not == itself)
    again = thrift.encode(fields)
    assert thrift.encode(thrift.decode(again)) == again


def test_truncated_and_too_deep_input_is_an_error() -> None:
    footer = thrift.encode([Field(1, STRUCT, [Field(1, BINARY, b"abc")])])
    for cut in range(len(footer)):
        with pytest.raises(thrift.ThriftError):
            thrift.decode(footer[:cut])
    deep = b"\x1c" * 100 + b"\x00" * 101  # struct in struct ... 100 levels
    with pytest.raises(thrift.ThriftError, match="too deep"):
        thrift.decode(deep)


def test_a_value_that_does_not_fit_its_type_is_refused_both_ways() -> None:
    for field in (Field(1, I32, 2**31), Field(1, I16, -(2**15) - 1), Field(1, BYTE, 128)):
        with pytest.raises(thrift.ThriftError, match="does not fit"):
            thrift.encode([field])
    # the bytes an encoder without the check would write (found by the random-bytes test)
    for type_, value in ((I32, 2**31), (I16, 2**20)):
        wide = ref_struct([Field(1, I64, value)])
        with pytest.raises(thrift.ThriftError, match="does not fit"):
            thrift.decode(bytes([wide[0] & 0xF0 | type_]) + wide[1:])
    assert thrift.decode(thrift.encode([Field(1, I32, -(2**31))])) == [Field(1, I32, -(2**31))]


def test_arrow_footers_round_trip_byte_for_byte(tmp_path: Path) -> None:
    # Given a file with statistics, dictionaries, a map and several row groups, as Arrow writes it
    n = 5000
    table = pa.table(
        {
            "s": pa.array([None if i % 3 else f"v{i % 7}" for i in range(n)]),
            "i": pa.array(range(n), pa.int64()),
            "f": pa.array([i / 3 for i in range(n)]),
            "b": pa.array([i % 2 == 0 for i in range(n)]),
            "m": pa.array(
                [[("k", str(i))] if i % 5 == 0 else None for i in range(n)], pa.map_(pa.string(), pa.string())
            ),
        }
    )
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=1200, compression="snappy")
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length : -8]
    # When its footer is decoded and encoded again, Then the bytes are the same, as the reference says
    fields = thrift.decode(footer)
    assert thrift.encode(fields) == footer == ref_struct(fields)
