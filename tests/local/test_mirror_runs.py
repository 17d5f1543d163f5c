"""The table mirrors the bucket, through make run's own path (issue 44, docs/mirror.md): a file
appended to or rewritten replaces its rows, the same bytes again change nothing, a deletion keeps
or retracts, and a kill -9 at any point of a batch that replaces leaves the table as if it ran once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from glue_processor.local.query import connect
from tests.local.test_first_hour import ROOT

pytestmark = pytest.mark.spark


def run(work: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    """make run's CLI on ``work``; ``fault``: a fail point that SIGKILLs its whole process group."""
    env = {k: v for k, v in os.environ.items() if k != "INGEST_FAULT"}
    if fault:
        env["INGEST_FAULT"] = f"{fault}:1"
    cmd = [sys.executable, "-m", "glue_processor.local.cli", "--workdir", str(work), *args]
    return subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False, start_new_session=True
    )


def write(path: Path, *values: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"n": v}) + "\n" for v in values))


def rows(work: Path) -> list[tuple[str, int, str]]:
    """(file, line, n) of every row a reader of the table sees."""
    found = connect(work / "output").execute("SELECT _source_uri, _line, n FROM events ORDER BY ALL").fetchall()
    return [(uri.rsplit("/", 1)[-1], int(line), str(n)) for uri, line, n in found]


def test_a_changed_file_replaces_its_rows_and_the_same_bytes_change_nothing(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "a.ndjson", 1, 2, 3)
    write(data / "b.ndjson", 9)
    assert run(work, "--data", str(data)).returncode == 0
    # When lines are appended to a.ndjson (a log written in the open)
    write(data / "a.ndjson", 1, 2, 3, 4, 5)
    appended = run(work)
    assert appended.returncode == 0, appended.stderr[-3000:]
    # Then the table holds each of its lines once, the earlier version's rows gone in the same commit
    assert rows(work) == [("a.ndjson", i, str(i)) for i in range(1, 6)] + [("b.ndjson", 1, "9")]
    assert "your files: 0 new, 1 changed; 1 loaded (5 rows)" in appended.stdout
    assert "versions replaced  1 file" in appended.stdout and "each (source, line) once" in appended.stdout
    # When it is rewritten shorter (a corrected export)
    write(data / "a.ndjson", 7, 8)
    assert run(work).returncode == 0
    assert rows(work) == [("a.ndjson", 1, "7"), ("a.ndjson", 2, "8"), ("b.ndjson", 1, "9")]
    # When the same bytes are uploaded again (a new mtime, the same eTag)
    os.utime(data / "a.ndjson")
    again = run(work)
    assert again.returncode == 0 and "1 already loaded" in again.stdout, again.stdout
    assert rows(work) == [("a.ndjson", 1, "7"), ("a.ndjson", 2, "8"), ("b.ndjson", 1, "9")]
    # When b.ndjson is deleted, on_delete keep (the default): its rows stay, and the summary says so
    (data / "b.ndjson").unlink()
    kept = run(work)
    assert kept.returncode == 0 and "1 deleted" in kept.stdout, kept.stdout
    assert ("b.ndjson", 1, "9") in rows(work)
    # And reconcile accounts for every version the history holds (replaced ones included)
    reconcile = subprocess.run(
        [sys.executable, "-m", "glue_processor.local.reconcile", "--workdir", str(work)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert reconcile.returncode == 0, reconcile.stdout + reconcile.stderr
    statuses = {r[0] for r in connect(work / "output").execute("SELECT status FROM load_history").fetchall()}
    assert {"ingested", "replaced", "duplicate", "deleted"} <= statuses


def test_a_deleted_file_is_retracted_and_a_new_upload_of_it_loaded(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "a.ndjson", 1, 2)
    write(data / "b.ndjson", 9)
    assert run(work, "--data", str(data), "--on-delete", "retract").returncode == 0
    (data / "a.ndjson").unlink()
    retracted = run(work)
    assert retracted.returncode == 0 and "1 retracted" in retracted.stdout, retracted.stdout + retracted.stderr
    assert rows(work) == [("b.ndjson", 1, "9")]
    write(data / "a.ndjson", 5)
    assert run(work).returncode == 0
    assert rows(work) == [("a.ndjson", 1, "5"), ("b.ndjson", 1, "9")]


def test_a_fixed_file_s_old_bad_line_stays_and_the_readme_tells_the_versions_apart(tmp_path: Path) -> None:
    # a newcomer fixed a bad line and re-ran: the README's query still showed it, with nothing to
    # say it was the replaced version's (README.md, the quarantine's queries, run as printed)
    import re

    from tests.local.test_first_hour import make

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```sql\n(.*?)```", readme, re.S) if "the bad lines of one object" in b]
    every, now = [q.strip() for q in block.split(";")[1:3]]
    assert "exports/a.ndjson" in every and "exports/a.ndjson" in now
    data, work = tmp_path / "data", tmp_path / "work"
    path = data / "exports" / "a.ndjson"
    path.parent.mkdir(parents=True)
    path.write_text('{"n": 1}\nnot json\n')
    assert run(work, "--data", str(data)).returncode == 0
    # When the bad line is fixed and the folder run again
    path.write_text('{"n": 1}\n{"n": 2}\n')
    assert run(work).returncode == 0
    assert rows(work) == [("a.ndjson", 1, "1"), ("a.ndjson", 2, "2")]

    def query(sql: str) -> list[str]:
        out = make("query", f"WORKDIR={work}", "FORMAT=csv", f"SQL={sql}")
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()[1:]

    # Then the first query shows the old version's bad line, and the second, of the versions the
    # table holds now, none
    assert [line.split(",")[:2] for line in query(every)] == [["2", "malformed JSON"]]
    assert query(now) == []
    # And the README's "what landed and loaded no row" lists neither version (both loaded rows),
    # but does list a file of bad lines only
    (history,) = [b for b in re.findall(r"```sql\n(.*?)```", readme, re.S) if "loaded no row" in b]
    (none,) = [q for q in history.split(";") if "loaded no row" in q]
    assert "SELECT" in none, none  # a statement, not only its comment
    assert query(none) == []
    (data / "exports" / "junk.ndjson").write_text("not json\n")
    assert run(work).returncode == 0
    assert [line.split(",")[:2] for line in query(none)] == [["exports/junk.ndjson", "empty"]]


def test_append_keeps_every_version_and_the_summary_says_why_rows_repeat(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "a.ndjson", 1, 2)
    assert run(work, "--data", str(data), "--on-overwrite", "append").returncode == 0
    write(data / "a.ndjson", 1, 2, 3)
    out = run(work)
    assert out.returncode == 0 and "using this WORKDIR's ON_OVERWRITE=append" in out.stdout
    assert len(rows(work)) == 5 and "2 rows of earlier versions of changed files kept beside" in out.stdout
    assert "each (source version, line) once" in out.stdout  # not "(source, line)": a line is once per version


# (after-read, after-stage, after-commit-record and after-batch: the chaos tests kill there on every
# table; these two are where a batch that replaces is half done: record committed, table not; table
# committed, key index not)
POINTS = ["before-table-commit", "before-key-index"]


@pytest.mark.parametrize("point", POINTS)
def test_a_kill_inside_a_batch_that_replaces_leaves_the_table_as_if_it_ran_once(tmp_path: Path, point: str) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "a.ndjson", 1, 2, 3)
    write(data / "b.ndjson", 9)
    assert run(work, "--data", str(data), "--on-delete", "retract").returncode == 0
    # Given a batch that replaces a.ndjson's rows and retracts b.ndjson's, killed (SIGKILL) at `point`
    write(data / "a.ndjson", 10, 20)
    (data / "b.ndjson").unlink()
    killed = run(work, fault=point)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr[-2000:])
    # When make run runs again
    again = run(work)
    assert again.returncode == 0, again.stderr[-3000:]
    # Then the table is the bucket: the new version's rows once, nothing of the old or the deleted
    assert rows(work) == [("a.ndjson", 1, "10"), ("a.ndjson", 2, "20")]


def test_tail_loads_only_what_a_log_file_appends(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "app.log.ndjson", 1, 2, 3)
    assert run(work, "--data", str(data), "--on-overwrite", "tail").returncode == 0
    write(data / "app.log.ndjson", 1, 2, 3, 4, 5)
    out = run(work)
    assert out.returncode == 0 and "your files: 0 new, 1 changed; 0 loaded, 1 extended (2 rows)" in out.stdout, (
        out.stdout
    )
    assert "only its lines from 4 on were read" in out.stdout
    assert rows(work) == [("app.log.ndjson", i, str(i)) for i in range(1, 6)]


@pytest.mark.parametrize("point", ["before-key-index"])
def test_a_kill_inside_a_batch_that_tails_loads_the_appended_lines_once(tmp_path: Path, point: str) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "app.ndjson", 1, 2)
    assert run(work, "--data", str(data), "--on-overwrite", "tail").returncode == 0
    write(data / "app.ndjson", 1, 2, 3, 4)
    killed = run(work, fault=point)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr[-2000:])
    assert run(work).returncode == 0
    assert rows(work) == [("app.ndjson", i, str(i)) for i in range(1, 5)]
    # and the next append goes on from line 5 (the key index was written by the replay)
    write(data / "app.ndjson", 1, 2, 3, 4, 5)
    out = run(work)
    assert out.returncode == 0 and "only its lines from 5 on were read" in out.stdout, out.stdout
    assert rows(work) == [("app.ndjson", i, str(i)) for i in range(1, 6)]


def test_a_run_killed_between_its_record_and_its_table_is_finished_and_counted_by_the_next(tmp_path: Path) -> None:
    # Given a first batch killed (SIGKILL) once its commit record is written, before its table commit
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "a.ndjson", 1, 2, 3)
    (data / "b.ndjson").write_text('{"n": 4}\n{not json\n')
    killed = run(work, "--data", str(data), fault="after-commit-record")
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr[-2000:])
    # When make run runs again: it says it resumes, finishes that batch's publication, and its
    # summary counts that batch (a newcomer read "0 loaded (0 rows)" as a loss: the run that ended
    # never printed one)
    again = run(work)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "ended without finishing (killed or crashed): resuming from its checkpoint" in again.stdout
    assert "batch 0 (the last run's, committed before it ended; published now): 2 of 2 files" in again.stdout
    assert "your files: 0 new; 2 loaded (4 rows), 1 line quarantined" in again.stdout, again.stdout
    assert "b.ndjson:2  malformed JSON" in again.stdout
    assert rows(work) == [("a.ndjson", i, str(i)) for i in (1, 2, 3)] + [("b.ndjson", 1, "4")]
    # And a run after it, with nothing new, starts nothing and counts nothing twice
    idle = run(work)
    assert idle.returncode == 0 and "nothing new in" in idle.stdout, idle.stdout
