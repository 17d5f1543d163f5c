"""The gzip decoder of the parse tasks: the same text as ``gzip.decompress`` on every valid object,
and every byte decoded before a break handed out before the break is raised."""

from __future__ import annotations

import gzip
import io
import random
import tracemalloc
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glue_processor.shared.gunzip import Corrupt, Gunzip, NotGzip, Truncated


def read_all(data: bytes, *, size: int = 8192, input_bytes: int = 1000) -> tuple[bytes, BaseException | None]:
    """Everything a reader gets from ``data`` read ``size`` bytes at a time, and the error that
    stopped it (None at the end)."""
    reader = Gunzip(io.BytesIO(data), input_bytes=input_bytes)
    got = bytearray()
    while True:
        try:
            block = reader.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            return bytes(got), exc
        assert len(block) <= size
        if not block:
            return bytes(got), None
        got += block


def text(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    return b"".join(
        b'{"id":"%d","r":"%s"}\n' % (i, rng.randbytes(rng.randrange(1, 40)).hex().encode()) for i in range(n)
    )


@settings(max_examples=150, deadline=None)
@given(
    members=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 300), st.integers(1, 9)), min_size=0, max_size=4),
    padding=st.lists(st.integers(0, 600), min_size=5, max_size=5),
    size=st.integers(1, 5000),
    input_bytes=st.integers(1, 3000),
)
def test_every_valid_object_reads_as_gzip_decompress_reads_it(
    members: list[tuple[int, int, int]], padding: list[int], size: int, input_bytes: int
) -> None:
    # Given members of any size and level (empty ones too), zero padding after any of them, read in
    # blocks of any size from input of any size
    padded = zip(members, padding[: len(members)], strict=True)
    data = b"".join(gzip.compress(text(s, n), compresslevel=level) + b"\0" * pad for (s, n, level), pad in padded)
    # Then the text is gzip's, and the end is clean
    assert read_all(data, size=size, input_bytes=input_bytes) == (gzip.decompress(data), None)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), lines=st.integers(1, 3000), cut=st.floats(0.0, 0.999), size=st.integers(1, 70_000))
def test_a_truncated_object_hands_out_everything_decoded_before_the_break(
    seed: int, lines: int, cut: float, size: int
) -> None:
    whole = text(seed, lines)
    body = gzip.compress(whole)
    cut_body = body[: int(len(body) * cut)]
    got, error = read_all(cut_body, size=size)
    # Then every byte read is the text's, and the break is raised after them (an empty object has none)
    assert whole.startswith(got)
    assert isinstance(error, Truncated | NotGzip | Corrupt) if cut_body else error is None
    # ... and nothing that zlib decoded before the break is withheld: a decoder given the same
    # bytes in one piece decodes no more
    one = zlib.decompressobj(16 + zlib.MAX_WBITS)
    decodable = one.decompress(cut_body)
    assert len(got) == len(decodable)


def test_bytes_after_a_member_that_are_not_gzip_stop_the_read_after_the_members_text() -> None:
    # Given one member whose text is far larger than a read, then garbage (what gunzip calls
    # "trailing garbage"), and a second object of two members followed by a half member
    whole = text(1, 20_000)
    garbage = gzip.compress(whole) + b"GARBAGE"
    got, error = read_all(garbage, size=1 << 20, input_bytes=1 << 20)
    # Then the member's text is read whole, and then the stop names what followed
    assert got == whole
    assert isinstance(error, NotGzip) and "after gzip member 1" in str(error) and "GARBAGE" in str(error)
    second = text(2, 100)
    two = gzip.compress(whole) + gzip.compress(second) + gzip.compress(second)[:30]
    got, error = read_all(two, size=1 << 20)
    assert got == whole + second
    assert isinstance(error, Truncated) and "member 3" in str(error)


def test_an_object_that_is_not_gzip_stops_before_any_text() -> None:
    got, error = read_all(b'{"id":"plain text named .gz"}\n')
    assert got == b"" and isinstance(error, NotGzip) and "first bytes" in str(error)
    assert read_all(b"") == (b"", None)


def test_a_corrupt_member_s_text_in_the_failing_read_is_dropped() -> None:
    # Given a member whose CRC-32 does not match its text (the trailer's first 4 bytes): zlib hands
    # out the whole text before it checks, and a flipped bit can decode to other valid JSON
    first, second = text(3, 500), text(4, 500)
    body = bytearray(gzip.compress(second))
    body[-8] ^= 0xFF
    got, error = read_all(bytes(body), size=1 << 20)
    # Then none of it is handed out, and the error says why
    assert got == b"" and isinstance(error, Corrupt) and "incorrect data check" in str(error)
    # ... while a member before it, whose check passed, is handed out whole
    got, error = read_all(gzip.compress(first) + bytes(body), size=1 << 20)
    assert got == first and isinstance(error, Corrupt) and "member 2" in str(error)


def test_zero_bytes_are_padding_after_a_member_only() -> None:
    assert read_all(b"\0" * 100)[0] == b"" and isinstance(read_all(b"\0" * 100)[1], NotGzip)
    assert read_all(gzip.compress(b"a\n") + b"\0" * 100) == (b"a\n", None)


def test_many_tiny_members_cost_the_read_not_the_members() -> None:
    # Given 200,000 members of one byte each (a list of pieces held 60-120x the read)
    body = gzip.compress(b"x", compresslevel=1) * 200_000
    reader = Gunzip(io.BytesIO(body))
    tracemalloc.start()
    try:
        block = reader.read(128 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert block == b"x" * (128 * 1024)
    assert peak < 1024 * 1024  # the read's buffer, its copy and an input slice


def test_a_read_never_returns_more_than_asked_whatever_the_ratio() -> None:
    # Given 256 MiB of zeros that compress ~1000:1 (a decompression bomb, at a scale a test can run)
    bomb = gzip.compress(b"\0" * (256 << 20), compresslevel=9)
    reader = Gunzip(io.BytesIO(bomb))
    total = 0
    while block := reader.read(1 << 20):
        assert len(block) <= 1 << 20  # memory follows the read, not the ratio
        total += len(block)
    assert total == 256 << 20


@pytest.mark.parametrize("size", [-1, 0])
def test_read_without_a_size_reads_a_bounded_block(size: int) -> None:
    reader = Gunzip(io.BytesIO(gzip.compress(b"abc\n" * 10)))
    assert reader.read(size) == b"abc\n" * 10
    assert reader.read() == b""
