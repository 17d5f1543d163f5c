"""What one careless or hostile producer's object can do to a task: bounded in time, memory and names.

Each test drives one kind of input that stalled, lost or would have wedged the job (issue 22): keys
crafted to collide in the scanner's hash table, empty rows under many known columns, a byte-order
mark, keys no catalog accepts as column names, line numbers past 2**31, JSON documents that are
not NDJSON.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import ndjson_arrow
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.memory import SHAPES, measure
from contracts.column_names import MAX_LENGTH, valid_column_name
from glue_processor.plan.ranges import count_lines, number_ranges
from glue_processor.read import ndjson
from glue_processor.read.task import memory_bound, run_task
from glue_processor.shared import names
from glue_processor.shared.objects import local_path
from glue_processor.shared.spec import FileTask
from glue_processor.shared.text import Limits
from tests.glue_processor.read.test_task import file_task, spec

MASK = (1 << 20) - 1  # a scan's table has at most 2**18 slots (MAX_SCAN_KEYS keys at half load)
FNV_OFFSET, FNV_PRIME = 14695981039346656037, 1099511628211
ALPHABET = np.frombuffer(bytes(c for c in range(0x21, 0x7F) if c not in b'"\\'), dtype=np.uint8)


def fnv_colliding_keys(count: int) -> list[bytes]:
    """``count`` distinct keys whose 64-bit FNV-1a hashes agree in their low 20 bits (the slot of a
    table of up to 2**20 entries under the scanner's old unseeded hash): a meet in the middle of
    three-byte halves, found in about a second."""
    inverse = pow(FNV_PRIME & MASK, -1, MASK + 1)
    triples = np.stack(np.meshgrid(ALPHABET, ALPHABET, ALPHABET, indexing="ij"), -1).reshape(-1, 3).astype(np.int64)
    forward = np.full(len(triples), (FNV_OFFSET ^ ord("k")) * FNV_PRIME & MASK, dtype=np.int64)
    for i in range(3):
        forward = ((forward ^ triples[:, i]) * (FNV_PRIME & MASK)) & MASK
    target = 0x5A5A5 & MASK
    backward = np.full(len(triples), target, dtype=np.int64)
    for i in (2, 1, 0):
        backward = ((backward * inverse) & MASK) ^ triples[:, i]
    order = np.argsort(forward, kind="stable")
    ordered = forward[order]
    lo = np.searchsorted(ordered, backward, side="left")
    hi = np.searchsorted(ordered, backward, side="right")
    halves = triples.astype(np.uint8)
    keys: list[bytes] = []
    for b in np.flatnonzero(hi > lo):
        for a in order[lo[b] : hi[b]]:
            keys.append(b"k" + halves[a].tobytes() + halves[b].tobytes())
            if len(keys) == count:
                return keys
    raise AssertionError("not enough collisions")


def fnv_low(key: bytes) -> int:
    h = FNV_OFFSET
    for c in key:
        h = ((h ^ c) * FNV_PRIME) & ((1 << 64) - 1)
    return h & MASK


def lines_of(keys: list[bytes], per_line: int) -> bytes:
    return b"".join(
        b"{" + b",".join(b'"%s":1' % k for k in keys[i : i + per_line]) + b"}\n" for i in range(0, len(keys), per_line)
    )


def test_keys_crafted_to_collide_cost_no_more_than_random_keys() -> None:
    # Given 20,000 keys that all collide under the scanner's old hash, and 20,000 random keys of the same length
    crafted = fnv_colliding_keys(20_000)
    assert len({fnv_low(k) for k in crafted}) == 1 and len(set(crafted)) == len(crafted)
    rng = random.Random(7)
    chars = bytes(ALPHABET)
    plain = [b"k" + bytes(rng.choice(chars) for _ in range(6)) for _ in range(20_000)]
    # When each set is scanned (two lines of 10,000 keys; room for 100 columns, the rest spilled)
    cost = {}
    for name, keys in (("crafted", crafted), ("random", plain)):
        parsed = ndjson.parse_ndjson(lines_of(keys, 10_000), room=100)
        assert parsed.rows == 2 and parsed.bad == []
        cost[name] = parsed.probes
    # Then the crafted keys cost what random ones do (the old hash made it ~20,000x: quadratic)
    assert cost["crafted"] < 2 * cost["random"], cost
    # And the cost is linear in the keys: twice the keys, about twice the probes
    double = ndjson.parse_ndjson(lines_of(crafted + fnv_colliding_keys(40_000)[20_000:], 10_000), room=100)
    assert double.probes < 3 * cost["crafted"], (double.probes, cost)


def test_a_line_with_too_many_distinct_keys_is_quarantined_with_its_reason() -> None:
    limit = ndjson_arrow.MAX_LINE_KEYS
    wide = b"{" + b",".join(b'"k%d":1' % i for i in range(limit + 1)) + b"}\n"
    at_limit = b"{" + b",".join(b'"k%d":1' % i for i in range(limit)) + b"}\n"
    repeated = b"{" + b",".join(b'"k":%d' % i for i in range(limit + 10)) + b"}\n"
    parsed = ndjson.parse_ndjson(wide + at_limit + repeated, room=10)
    assert [(b.line, b.reason) for b in parsed.bad] == [(1, ndjson.REASON_TOO_MANY_KEYS)]
    assert parsed.lines.to_pylist() == [2, 3]  # the bound counts distinct keys: a repeated key is one


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_task_s_peak_memory_stays_under_its_stated_bound_whatever_the_shape(shape: str, tmp_path: Path) -> None:
    # Given one object of the shape (2 MiB of text; the huge line 16 MiB), read by one task in a fresh process
    got = measure(shape, 2, tmp_path)
    # Then every row is loaded (the 1,000-known-columns shape lost all 2.8M rows to MemoryError before)
    expected = {
        "1000 known columns x empty rows": 2 * 1024 * 1024 // 3,
        "1000 keys on line 1, then empty rows": 2 * 1024 * 1024 // 3 + 1,
        "one huge line (8x the size)": 2,
        "one malformed huge line (8x the size)": 1,
        "many tiny lines": 2 * 1024 * 1024 // 8,
        "a new key per line": 140_000,
        "tiny rows over 10,000 partitions": 90_000,
    }[shape]
    assert (got["rows"], got["bad"]) == (expected, 1 if "malformed" in shape else 0)
    # And the task's peak stays under the bound tasks.memory_bound states
    longest = 16 * 1024 * 1024 if "huge" in shape else 0
    assert (got["peak_mib"] - got["start_mib"]) * 1024 * 1024 <= memory_bound(longest_line=longest), got


@pytest.mark.parametrize("shape", ["one huge line (8x the size)", "one malformed huge line (8x the size)"])
def test_a_line_of_248_mib_stays_under_the_bound_that_its_copies_state(shape: str, tmp_path: Path) -> None:
    # Given one line near --max_line_mb (where the line, not the constant part of the bound, decides):
    # a value costs its text, its column and Arrow's statistics of it (the bound said 3 copies; 11)
    got = measure(shape, 31, tmp_path)
    assert got["rows"] == (1 if "malformed" in shape else 2)
    assert (got["peak_mib"] - got["start_mib"]) * 1024 * 1024 <= memory_bound(longest_line=248 * 1024 * 1024), got


def test_a_scan_holds_at_most_its_cells_and_a_chunk_is_read_in_pieces() -> None:
    # Given 1,000 known columns and 100,000 empty rows (100 million cells in one chunk)
    known = [f"c{i}" for i in range(1000)]
    data = b"{}\n" * 100_000
    pieces = list(ndjson.parse_pieces(data, list(known), max_columns=1000, max_cells=1_000_000))
    # Then each piece holds at most a million cells, and together they hold every row, numbered in order
    assert all(p.rows * len(p.keys) <= 1_000_000 for p in pieces)
    assert len(pieces) == 100
    lines = np.concatenate([p.lines.to_numpy() for p in pieces])
    assert np.array_equal(lines, np.arange(1, 100_001))


def test_a_new_column_is_not_admitted_past_the_cell_budget_the_line_waits_for_the_next_piece() -> None:
    data = b'{"a":1}\n' * 10 + b'{"b":1,"c":2}\n' + b'{"a":3}\n'
    pieces = list(ndjson.parse_pieces(data, [], max_columns=10, max_cells=12))
    assert [p.rows for p in pieces] == [10, 2]  # 11 rows x 2 columns would be past 12 cells
    assert pieces[1].lines.to_pylist() == [11, 12]
    assert pieces[1].keys == ("a", "b", "c")


def _one_task(tmp_path: Path, name: str, body: bytes, **overrides: object) -> tuple[list[dict[str, object]], list[str]]:
    src = tmp_path / name
    src.write_bytes(body)
    result = run_task(spec([file_task(src.as_uri())], f"file://{tmp_path}/out", **overrides))
    rows = [r for s in result.data for r in pq.read_table(local_path(s.uri)).to_pylist()]
    records = [json.loads(x) for q in result.quarantine for x in Path(local_path(q.uri)).read_text().splitlines()]
    return rows, records


@pytest.mark.parametrize("gz", [False, True])
def test_a_byte_order_mark_at_the_start_of_an_object_is_skipped(tmp_path: Path, gz: bool) -> None:
    body = b'\xef\xbb\xbf{"a":"1"}\n{"a":"2"}\n'
    rows, bad = _one_task(tmp_path, "bom.json.gz" if gz else "bom.json", gzip.compress(body) if gz else body)
    assert sorted((r["a"], r["_line"]) for r in rows) == [("1", 1), ("2", 2)]
    assert bad == []


def test_a_byte_order_mark_anywhere_else_is_part_of_its_line(tmp_path: Path) -> None:
    # Given an object read in two byte ranges, the second starting with a line that begins with a BOM
    first = b'{"a":"1"}\n' * 10
    second = b'\xef\xbb\xbf{"a":"x"}\n{"a":"2"}\n'
    src = tmp_path / "ranged.json"
    src.write_bytes(first + second)
    base = file_task(src.as_uri())
    items = [
        FileTask(**{**base.__dict__, "start": 0, "end": len(first)}),
        FileTask(**{**base.__dict__, "start": len(first), "end": None}),
    ]
    numbered, problems = number_ranges(items, lambda fn, xs: [fn(x) for x in xs])
    assert problems == []
    result = run_task(spec(numbered, f"file://{tmp_path}/out"))
    # Then the BOM line is quarantined (not silently trimmed) and the other lines load with their numbers
    assert sum(f.good for f in result.files) == 11
    (q,) = result.quarantine
    (record,) = [json.loads(x) for x in Path(local_path(q.uri)).read_text().splitlines()]
    assert (record["line"], record["reason"]) == (11, ndjson.REASON_MALFORMED)


def test_line_numbers_past_2_31_are_exact_int64(tmp_path: Path) -> None:
    # Given a range whose first line is numbered just under 2**31 (an object with billions of lines)
    src = tmp_path / "far.json"
    src.write_bytes(b'{"a":"1"}\n{"a":"2"}\nbad\n{"a":"3"}\n{"a":"4"}\n')
    first = 2**31 - 2
    item = FileTask(**{**file_task(src.as_uri()).__dict__, "first_line": first})
    result = run_task(spec([item], f"file://{tmp_path}/out"))
    (staged,) = result.data
    table = pq.read_table(local_path(staged.uri))
    # Then _line is int64 and exact across 2**31, and so is the bad line's number
    assert table.schema.field("_line").type == pa.int64()
    assert table.column("_line").to_pylist() == [first, first + 1, first + 3, first + 4]
    (q,) = result.quarantine
    assert json.loads(Path(local_path(q.uri)).read_text())["line"] == first + 2


def test_a_scan_refuses_line_numbers_that_would_not_fit_in_64_bits() -> None:
    with pytest.raises(OverflowError):
        ndjson_arrow.scan(b"{}\n{}\n", [], 1, first_line=2**63 - 2)


@pytest.mark.parametrize(
    "key",
    ["x" * (MAX_LENGTH + 1), "a\nb", "nul\u0000", "us\u001f", "bad\uffff", "\U0001f600" * 65],
)
def test_a_key_that_cannot_name_a_column_keeps_its_value_in_extra_under_its_own_name(tmp_path: Path, key: str) -> None:
    assert not valid_column_name(key)
    body = (json.dumps({"a": "1", key: "v1"}) + "\n" + json.dumps({key: {"n": 2}}) + "\n").encode()
    rows, bad = _one_task(tmp_path, "names.json", body)
    assert bad == []
    # Then no column is named after it: every column name is valid, and its values are in _extra
    names = list(pq.read_schema(next((tmp_path / "out" / "data").glob("*.parquet"))).names)
    assert all(valid_column_name(n) for n in names)
    assert sorted((r["_line"], dict(r["_extra"] or [])) for r in rows) == [(1, {key: "v1"}), (2, {key: '{"n":2}'})]


def test_column_names_stay_valid_when_a_suffix_makes_them_distinct() -> None:
    long = "K" * MAX_LENGTH
    mapping = dict(names.column_names([long, long.lower()]))
    assert all(valid_column_name(n) for n in mapping.values())
    assert len({n.lower() for n in mapping.values()}) == 2


def test_a_json_array_of_objects_is_read_record_by_record(tmp_path: Path) -> None:
    # Given an API dump: one JSON array of 10,000 objects on one line, and the same pretty-printed
    records = [{"id": i, "v": {"n": [i, i]}} for i in range(10_000)]
    rows, bad = _one_task(tmp_path, "dump.json", json.dumps(records).encode())
    assert bad == []
    assert sorted(int(r["id"]) for r in rows) == list(range(10_000))
    assert {r["_line"] for r in rows} == {1}
    rows, bad = _one_task(tmp_path, "pretty.json", json.dumps(records[:3], indent=2).encode())
    # Then each record is a row, _line the line where it starts
    assert bad == []
    assert sorted((r["id"], r["v"], r["_line"]) for r in rows) == [
        ("0", '{"n":[0,0]}', 2),
        ("1", '{"n":[1,1]}', 11),
        ("2", '{"n":[2,2]}', 20),
    ]


def test_pretty_printed_objects_one_after_another_are_records(tmp_path: Path) -> None:
    body = "\n".join(json.dumps({"k": i, "deep": {"a": [1, {"b": "x\ny"}]}}, indent=4) for i in range(3)).encode()
    rows, bad = _one_task(tmp_path, "pretty.ndjson", body)
    assert bad == []
    assert sorted((r["k"], r["deep"], r["_line"]) for r in rows) == [
        ("0", '{"a":[1,{"b":"x\\ny"}]}', 1),
        ("1", '{"a":[1,{"b":"x\\ny"}]}', 12),
        ("2", '{"a":[1,{"b":"x\\ny"}]}', 23),
    ]


@pytest.mark.parametrize("good", [3, 30_000])  # the text inside the sniffed first MiB, and past it
@pytest.mark.parametrize("gz", [False, True])
def test_a_first_line_cut_inside_its_object_costs_that_line_only(tmp_path: Path, good: int, gz: bool) -> None:
    # Given NDJSON whose first line is cut inside its object (a newcomer's try lost a whole 6.8 MB
    # file this way: the object was read as one pretty-printed record running to its end), the
    # cut ending after a key, an open object, an open array
    for n, cut in enumerate([b'{"id":"cut","v":', b'{"id":"cut","v":{"w":1,', b'{"id":"cut","v":[1,']):
        lines = [json.dumps({"id": f"g{i}", "v": i, "s": "y" * 30}).encode() for i in range(good)]
        body = cut + b"\n" + b"\n".join(lines) + b"\n"
        name = f"first{n}.ndjson"
        (tmp_path / name).mkdir()
        rows, bad = _one_task(tmp_path / name, name + (".gz" if gz else ""), gzip.compress(body) if gz else body)
        # Then every whole line loads at its number and the cut one is quarantined where it stands
        assert sorted((r["_line"], r["id"]) for r in rows) == sorted((i + 2, f"g{i}") for i in range(good))
        assert [(b["kind"], b["line"], b["raw"]) for b in bad] == [("line", 1, cut.decode())]


def test_a_cut_first_line_before_lines_that_do_not_balance_costs_those_lines_only(tmp_path: Path) -> None:
    # Given a cut first line, then whole lines, one of them the torn tail of another line (its
    # closing brace unmatched: a review found it turned the file back into one record)
    good = [json.dumps({"id": f"g{i}", "v": i}).encode() for i in range(5_000)]
    body = b"\n".join([b'{"id":"cut","v":', *good[:2_500], b'"s":"yyy"}', *good[2_500:]]) + b"\n"
    rows, bad = _one_task(tmp_path, "torn.ndjson", body)
    # Then every whole line loads and the two broken ones are quarantined where they stand
    assert len(rows) == 5_000 and {r["id"] for r in rows} == {f"g{i}" for i in range(5_000)}
    assert [b["line"] for b in bad] == [1, 2_502]


@pytest.mark.parametrize("big", [False, True])  # the first object within the sniffed MiB, and past it
def test_a_pretty_printed_first_object_is_still_a_document(tmp_path: Path, big: bool) -> None:
    # Given pretty-printed objects whose first line is a key ending in a colon, its value on the next
    rows, bad = _one_task(tmp_path, "colon.json", b'{"id":\n  "a", "v": {\n "w": [1,\n 2]}}\n{"id":\n"b"}\n')
    # Then each object is one record, as before
    assert bad == []
    assert sorted((r["id"], r["v"], r["_line"]) for r in rows) == [("a", '{"w":[1,2]}', 1), ("b", None, 5)]
    # And an API export that is one object holding the records, indented (a review: past the
    # sniffed MiB it was read as NDJSON, every line quarantined), is one record
    n = 40_000 if big else 100
    export = json.dumps({"items": [{"id": i, "name": "x" * 10} for i in range(n)]}, indent=2).encode()
    assert (len(export) > 1 << 20) == big
    rows, bad = _one_task(tmp_path, "export.json", export)
    assert bad == [] and len(rows) == 1 and len(json.loads(rows[0]["items"])) == n


def test_elements_that_are_not_objects_are_quarantined_with_their_position(tmp_path: Path) -> None:
    body = b'[\n  {"a": 1},\n  3,\n  "text",\n  [1, 2],\n  {"a": [1}\n, {"a": 2}\n]\n'
    rows, bad = _one_task(tmp_path, "mixed.json", body)
    assert sorted((r["a"], r["_line"]) for r in rows) == [("1", 2), ("2", 7)]
    assert [(b["line"], b["reason"], b["raw"]) for b in bad] == [
        (3, "record is a JSON scalar, expected an object", "3"),
        (4, "record is a JSON scalar, expected an object", '"text"'),
        (5, "record is a JSON array, expected an object", "[1, 2]"),
        (6, ndjson.REASON_MALFORMED, '{"a": [1}'),
    ]


def test_an_empty_top_level_array_contributes_no_record_and_no_quarantine(tmp_path: Path) -> None:
    # Given documents whose top-level arrays are containers of records, some of them empty
    rows, bad = _one_task(tmp_path, "empty.json", b"[]\n")
    assert (rows, bad) == ([], [])
    rows, bad = _one_task(tmp_path, "mixed.json", b'[]\n{"id":"1"}\n[]\n[{"id":"2"}, []]\n')
    # Then the records load where they start; an empty array is no record (as an export of none),
    # while an array inside one is an element that is not an object
    assert sorted((r["id"], r["_line"]) for r in rows) == [("1", 2), ("2", 4)]
    assert [(b["line"], b["reason"]) for b in bad] == [(4, "record is a JSON array, expected an object")]


@pytest.mark.parametrize(
    ("body", "loaded", "lines"),
    [
        (b"[", [], []),  # cut right after its opening bracket
        (b"[,]", [], [(1, ",")]),  # a comma that separates nothing
        (b"[][]", [], [(1, "][")]),  # two values with nothing between them
        (b"[{}", [], []),  # an element, then cut: an empty object is a record with no column
        (b'[{"a":"1"},{"a":"2"}', ["1", "2"], []),  # an unclosed array after good elements
        (b'[{"a":"1"},\n{"a":"2"}\n', ["1", "2"], []),
        (b'[{"a":"1"},,{"a":"2"}]', ["1", "2"], [(1, ",")]),
    ],
)
def test_a_cut_or_malformed_document_leaves_a_record_saying_where_it_broke(
    tmp_path: Path, body: bytes, loaded: list[str], lines: list[tuple[int, str]]
) -> None:
    # Given a file read as a JSON document that is cut or malformed (each left no trace before)
    result = run_task(spec([file_task(_write(tmp_path, "doc.json", body).as_uri())], f"file://{tmp_path}/out"))
    rows = [r for s in result.data for r in pq.read_table(local_path(s.uri)).to_pylist()]
    records = [json.loads(x) for q in result.quarantine for x in Path(local_path(q.uri)).read_text().splitlines()]
    (found,) = result.files
    # Then its good records load, every stray piece is a quarantined line where it stood, and a
    # document that ends inside its array says so on the object (and in a file record when rows loaded)
    assert sorted(r["a"] for r in rows if r.get("a") is not None) == loaded
    assert [(r["line"], r["raw"]) for r in records if r["kind"] == "line"] == lines
    cut = body.count(b"[") > body.count(b"]")
    if cut:
        assert found.reason is not None and "ends inside the array opened on line 1" in found.reason
        assert found.status == ("ingested" if found.good else "unreadable")
        assert [r["kind"] for r in records if r["kind"] == "file"] == (["file"] if found.good else [])
    else:
        assert found.reason is None and not [r for r in records if r["kind"] == "file"]


def test_a_first_line_that_is_an_array_then_lines_quarantines_every_stray_line(tmp_path: Path) -> None:
    # Given NDJSON whose first line is an array (so the object is read as a document), then lines
    body = b'[{"a":"1"}]\n{"a":"2"}\n,\n,,\n{"a":"3"},\n[]\n{"a":"4"}\n'
    rows, bad = _one_task(tmp_path, "mixed.json", body)
    # Then every record loads and every stray line is quarantined at its line (a lone comma, two,
    # a trailing one vanished before); an empty array is no record, as an export of none
    assert sorted((r["a"], r["_line"]) for r in rows) == [("1", 1), ("2", 2), ("3", 5), ("4", 7)]
    assert [(b["line"], b["raw"]) for b in bad] == [(3, ","), (4, ","), (4, ","), (5, ",")]


def _write(root: Path, name: str, body: bytes) -> Path:
    path = root / name
    path.write_bytes(body)
    return path


def test_a_record_longer_than_max_line_mb_is_quarantined_and_the_rest_load(tmp_path: Path) -> None:
    body = b'[{"a":"' + b"x" * 4096 + b'"},\n{"a":"small"}]'
    rows, bad = _one_task(tmp_path, "long.json", body, limits=Limits(max_line_bytes=1024))
    assert [(r["a"], r["_line"]) for r in rows] == [("small", 2)]
    assert [(b["line"], b["raw"][:7]) for b in bad] == [(1, '{"a":"x')]


@pytest.mark.parametrize("name", ["line.json", "document.json"])
def test_a_long_bad_line_keeps_its_head_and_its_size_in_its_quarantine_record(tmp_path: Path, name: str) -> None:
    # Given a malformed line of 1 MiB of control characters (its JSON, kept whole, was 6 MiB)
    line = b'{"a":"' + b"\x01" * (1024 * 1024) + b'"}'
    body = line + b'\n{"a":"ok"}\n' if name == "line.json" else b"[" + line + b',\n{"a":"ok"}]'
    rows, bad = _one_task(tmp_path, name, body)
    # Then the record says where and how long it was, and keeps its first RAW_BYTES
    assert [r["a"] for r in rows] == ["ok"]
    ((record),) = bad
    assert (record["line"], record["raw_bytes"], len(record["raw"])) == (1, len(line), ndjson.RAW_BYTES)
    assert record["raw"].startswith('{"a":"\x01')


def test_a_large_document_split_in_ranges_is_read_whole(tmp_path: Path) -> None:
    # Given a JSON array the planner cut into two byte ranges (as a large plain object)
    src = tmp_path / "big.json"
    src.write_bytes(json.dumps([{"i": i} for i in range(1000)], indent=1).encode())
    base = file_task(src.as_uri())
    cut = src.stat().st_size // 2
    items = [FileTask(**{**base.__dict__, "start": 0, "end": cut}), FileTask(**{**base.__dict__, "start": cut})]
    # When the ranges are counted
    assert count_lines(items[0]).document
    numbered, problems = number_ranges(items, lambda fn, xs: [fn(x) for x in xs])
    # Then the object is one whole-object task, and it loads every record
    assert problems == [] and [(i.start, i.end) for i in numbered] == [(0, None)]
    result = run_task(spec(numbered, f"file://{tmp_path}/out"))
    assert sum(f.good for f in result.files) == 1000


def test_a_truncated_gzip_object_loads_every_line_before_the_break(tmp_path: Path) -> None:
    # Given a gzip object of 40,000 lines (~1.4 MB of text: less than one 8 MiB read) cut half way
    lines = [b'{"id":"%d","pad":"%s"}\n' % (i, b"x" * (i % 50)) for i in range(40_000)]
    body = gzip.compress(b"".join(lines))
    rows, bad = _one_task(tmp_path, "cut.json.gz", body[: len(body) // 2])
    # Then every whole line decoded before the break loads (GzipFile lost the whole read: no row)
    loaded = sorted(int(str(r["id"])) for r in rows)
    assert len(loaded) > 15_000 and loaded == list(range(len(loaded)))
    assert [r["_line"] for r in rows] == [int(str(r["id"])) + 1 for r in rows]
    # ... and one record says the rest was not: from the first line not loaded, the cut one
    (stop,) = bad
    assert "truncated" in stop["reason"] and f"lines from {len(loaded) + 1} on were not loaded" in stop["reason"]


def test_bytes_that_are_not_gzip_after_a_member_lose_no_line_of_it(tmp_path: Path) -> None:
    # Given one gzip member (what gunzip reads, warning of "trailing garbage") followed by other bytes
    body = gzip.compress(b"".join(b'{"id":"%d"}\n' % i for i in range(5_000))) + b"GARBAGE"
    rows, bad = _one_task(tmp_path, "tail.json.gz", body)
    # Then all its lines load, and a record names the bytes after it (they could be data)
    assert sorted(int(str(r["id"])) for r in rows) == list(range(5_000))
    (stop,) = bad
    assert "after gzip member 1 are not gzip" in stop["reason"] and "GARBAGE" in stop["reason"]
    assert "lines from 5001 on were not loaded" in stop["reason"]
