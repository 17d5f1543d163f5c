"""ndjson_arrow.newlines: the LF count of a slice, without a copy, as bytes.count says."""

from __future__ import annotations

import ndjson_arrow
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=20_000).map(lambda b: b.replace(b"\x0b", b"\n")),
    start=st.integers(-5, 21_000),
    end=st.integers(-5, 21_000),
)
def test_newlines_counts_as_bytes_count(data: bytes, start: int, end: int) -> None:
    want = data[max(0, start) : max(0, end)].count(b"\n") if start >= 0 and end >= 0 else None
    if want is not None:
        assert ndjson_arrow.newlines(data, start, end) == want
        assert ndjson_arrow.newlines(memoryview(data), start, end) == want
        assert ndjson_arrow.newlines(bytearray(data), start, end) == want
    assert ndjson_arrow.newlines(data) == data.count(b"\n")


def test_long_runs_of_newlines_do_not_overflow_a_lane() -> None:
    data = b"\n" * 100_003 + b"x" + b"\n" * 4081
    assert ndjson_arrow.newlines(data) == 104_084
    assert ndjson_arrow.newlines(data, 7, 100_010) == 100_003 - 7 + 6
