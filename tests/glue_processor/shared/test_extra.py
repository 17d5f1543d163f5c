"""Key explosion: keys past ``max_columns`` go to the ``_extra`` map; nothing is lost, later files stay narrow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from glue_processor.read.task import run_task
from glue_processor.shared.extra import EXTRA, admit, to_map
from glue_processor.shared.names import LINEAGE_COLUMNS, column_names
from glue_processor.shared.objects import local_path
from glue_processor.shared.spec import TaskSpec
from glue_processor.write.merge import MergeSpec, merge_parts
from tests.glue_processor.read.test_task import file_task
from tests.glue_processor.read.test_task import spec as task_spec


def spec(files: list[Path], out: str, **overrides: Any) -> TaskSpec:
    """test_tasks' task over ``files``, with no keys known unless said."""
    return task_spec([file_task(p.as_uri()) for p in files], out, **{"known": (), **overrides})


def rows_of(uris: list[str]) -> list[dict[str, Any]]:
    """Every row as {key: value}: the data columns and the _extra entries together (JSON keys)."""
    out = []
    for uri in uris:
        table = pq.read_table(local_path(uri))
        data = [c for c in table.column_names if c not in (*LINEAGE_COLUMNS, EXTRA)]
        for row in table.to_pylist():
            values = {c: row[c] for c in data if row[c] is not None}
            for key, value in row[EXTRA] or []:
                assert key not in values, f"{key} both a column and in _extra"
                values[key] = value
            out.append({"_line": row["_line"], **values})
    return sorted(out, key=lambda r: r["_line"])


def reference(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def text(v: Any) -> str:
        return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)

    return [{"_line": n, **{k: text(v) for k, v in obj.items() if v is not None}} for n, obj in enumerate(lines, 1)]


def test_admit_takes_keys_while_there_is_room_in_order() -> None:
    keys, seen = ["a"], {"a"}
    assert admit(keys, seen, ["a", "b", "c", "d"], 3) == ["d"]
    assert keys == ["a", "b", "c"]
    assert admit(keys, seen, ["b", "e"], 3) == ["e"]


def test_to_map_keeps_values_per_row_and_merges_a_base() -> None:
    b = pa.array(["1", None, "3"], pa.large_string())
    c = pa.array([None, None, '{"x":1}'], pa.large_string())
    base = pa.array([[("z", "9")], None, []], pa.map_(pa.string(), pa.string()))
    made = to_map(["b", "c"], [b, c], 3, base=base)
    assert made.to_pylist() == [[("z", "9"), ("b", "1")], None, [("b", "3"), ("c", '{"x":1}')]]
    assert to_map(["b"], [pa.nulls(2, pa.large_string())], 2).to_pylist() == [None, None]


def test_a_key_explosion_goes_to_extra_and_later_files_stay_narrow(tmp_path: Path) -> None:
    # Given a file with 10,000 distinct keys (ids as keys), then a file of one small record
    ids = [{"id": "x", **{f"k{i:05d}": i for i in range(n * 100, n * 100 + 100)}} for n in range(100)]
    wide = tmp_path / "ids.json"
    wide.write_text("".join(json.dumps(r) + "\n" for r in ids))
    small = tmp_path / "small.json"
    small.write_text('{"v":1}\n')
    # When a task with a bound of 50 columns loads the wide one
    first = run_task(spec([wide], f"file://{tmp_path}/a", max_columns=50))
    # Then the table gets 50 columns, the first seen, and every other value is in _extra
    (outcome,) = first.files
    assert len(outcome.new_keys) == 50
    assert outcome.new_keys[0] == "id"
    assert first.extra_values == 10_001 - 50
    assert rows_of([s.uri for s in first.data]) == reference(ids)
    (part,) = first.data
    assert len(pq.read_schema(local_path(part.uri)).names) == 50 + len(LINEAGE_COLUMNS) + 1
    # And a later task, knowing those 50 keys, writes the small file 50 columns wide, not 10,000
    later = run_task(spec([small], f"file://{tmp_path}/b", known=outcome.new_keys, max_columns=50))
    (small_part,) = later.data
    assert len(pq.read_schema(local_path(small_part.uri)).names) == 50 + len(LINEAGE_COLUMNS) + 1
    assert rows_of([small_part.uri]) == [{"_line": 1, "v": "1"}]


def test_keys_two_tasks_admitted_past_the_batch_bound_are_folded_when_written(tmp_path: Path) -> None:
    # Given two tasks that each had room for 3 new keys, and found different ones
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    lines_one = [{"a": 1, "b": "x", "c": [1, 2]}]
    lines_two = [{"d": "é", "e": {"f": None}, "a": 2}]
    one.write_text("".join(json.dumps(r) + "\n" for r in lines_one))
    two.write_text("".join(json.dumps(r) + "\n" for r in lines_two))
    (p1,) = run_task(spec([one], f"file://{tmp_path}/t1", max_columns=3)).data
    (p2,) = run_task(spec([two], f"file://{tmp_path}/t2", max_columns=3)).data
    # When the batch keeps the first three keys in task order (a, b, c) and writes one file
    merged = merge_parts(MergeSpec(0, (p1, p2), ("a", "b", "c"), f"file://{tmp_path}/out/f.parquet"))
    # Then the file has those columns and the other task's keys are in _extra, values unchanged
    table = pq.read_table(local_path(merged.uri))
    assert [name for _, name in column_names(("a", "b", "c"))] == table.column_names[:3]
    assert EXTRA in table.column_names and "d" not in table.column_names
    rows = [{k: v for k, v in r.items() if k != "_line"} for r in rows_of([merged.uri])]
    assert sorted(rows, key=str) == sorted(
        [{"a": "1", "b": "x", "c": "[1,2]"}, {"a": "2", "d": "é", "e": '{"f":null}'}], key=str
    )


@settings(max_examples=30, deadline=None)
@given(
    records=st.lists(
        st.dictionaries(
            st.sampled_from([f"k{i}" for i in range(40)]),
            st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)),
            max_size=8,
        ),
        min_size=1,
        max_size=30,
    ),
    bound=st.integers(1, 12),
    known=st.integers(0, 5),
)
def test_no_value_is_lost_whatever_the_bound(
    tmp_path_factory: Any, records: list[dict[str, Any]], bound: int, known: int
) -> None:
    tmp = tmp_path_factory.mktemp("bound")
    src = tmp / "in.json"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    known_keys = tuple(f"k{i}" for i in range(known))
    result = run_task(spec([src], f"file://{tmp}/out", known=known_keys, max_columns=bound))
    assert rows_of([s.uri for s in result.data]) == reference(records)
    for part in result.data:
        assert len(part.keys) <= max(bound, known)
