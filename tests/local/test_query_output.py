"""What ``make query`` prints of a result too long to read: a newcomer's first ``SELECT *`` of a
1.6M-row table printed every row as a table (67 s, ~400 MB of text), all held in memory first."""

from __future__ import annotations

import csv
import io

import duckdb
import pytest

from glue_processor.local.query import SHOWN_ROWS, _print


def _printed(sql: str, fmt: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    con = duckdb.connect()
    (statement,) = con.extract_statements(sql)
    _print(con, statement, fmt)
    return capsys.readouterr().out.splitlines()


def test_a_table_shows_its_first_rows_and_says_there_are_more(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _printed(f"SELECT range AS n FROM range({SHOWN_ROWS * 30})", "table", capsys)
    assert [x.strip() for x in lines[2 : 2 + SHOWN_ROWS]] == [str(i) for i in range(SHOWN_ROWS)]
    assert len(lines) == 2 + SHOWN_ROWS + 1
    assert lines[-1] == f"(the first {SHOWN_ROWS:,} rows of more: add LIMIT, or FORMAT=csv prints them all)"
    # exactly the bound: every row, counted as before
    lines = _printed(f"SELECT range AS n FROM range({SHOWN_ROWS})", "table", capsys)
    assert lines[-1] == f"({SHOWN_ROWS} rows)" and len(lines) == 2 + SHOWN_ROWS + 1


def test_csv_prints_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _printed(f"SELECT range AS n, 'a,b' AS s FROM range({SHOWN_ROWS * 30})", "csv", capsys)
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    assert rows[0] == ["n", "s"] and len(rows) == 1 + SHOWN_ROWS * 30
    assert rows[-1] == [str(SHOWN_ROWS * 30 - 1), "a,b"]
