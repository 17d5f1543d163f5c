"""Every shape of JSON ``make bench`` measures reads back as the README's output semantics say.

Each bench shape's generator writes lines with a seed hypothesis draws; the parser's values are
checked against a reference decoding with Python's ``json``: strings as themselves, ``null`` as
NULL, anything else as its compact text (white space outside strings removed, escapes as the
producer wrote them), whatever keys are already known.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.shapes import SHAPES
from glue_processor.read import ndjson as T

_WHITE = re.compile(rb'("(?:[^"\\]|\\.)*")|[ \t\r\n]+')


def compact_as_written(text: bytes) -> str:
    """A JSON text without the white space outside its strings, the rest untouched."""
    return _WHITE.sub(lambda m: m.group(1) or b"", text).decode()


def reference(line: bytes) -> dict[str, Any]:
    """{key: value} of one line, per the output semantics, from Python's json."""
    out = {}
    for key, value in json.loads(line).items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, str):
            out[key] = value
        else:
            out[key] = None  # filled from the raw text below
    return out


def _skip_white(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def raw_values(line: bytes) -> dict[str, bytes]:
    """The raw text of each top-level value, found with Python's own scanner."""
    decoder = json.JSONDecoder()
    text = line.decode()
    values: dict[str, bytes] = {}
    pos = _skip_white(text, text.index("{") + 1)
    while text[pos] != "}":
        key, pos = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
        pos = _skip_white(text, _skip_white(text, pos) + 1)  # past the colon
        _, end = decoder.raw_decode(text, pos)
        values[key] = text[pos:end].encode()
        pos = _skip_white(text, end)
        if text[pos] == ",":
            pos = _skip_white(text, pos + 1)
    return values


@pytest.mark.parametrize("shape", sorted(SHAPES))
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), lines=st.integers(1, 40), known_first=st.booleans())
def test_every_bench_shape_reads_back_as_the_reference(shape: str, seed: int, lines: int, known_first: bool) -> None:
    rng = random.Random(seed)
    text = [SHAPES[shape](rng, n).encode() for n in range(lines)]
    data = b"\n".join(text) + b"\n"
    fresh = T.parse_ndjson(data)
    parsed = T.parse_ndjson(data, fresh.keys) if known_first else fresh
    assert parsed.bad == [] and parsed.lines.to_pylist() == list(range(1, lines + 1))
    columns = [c.to_pylist() for c in parsed.columns]
    for row, line in enumerate(text):
        want = reference(line)
        raw = raw_values(line)
        for key in want:
            if want[key] is None:
                want[key] = compact_as_written(raw[key])
        got = {k: col[row] for k, col in zip(parsed.keys, columns, strict=True) if col[row] is not None}
        assert got == want, (shape, line)
