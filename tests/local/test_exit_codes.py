"""The README's exit codes, as a user meets them through make: "A run whose rows a table refused
names the files as `not published` and exits 1" (make then says ``Error 1``)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from pyiceberg.types import LongType

from glue_processor.table.catalog import open_catalog
from tests.local.test_first_hour import ROOT, make, write


def test_a_run_whose_rows_the_table_refused_exits_1_naming_the_files(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "w"
    write(data / "a.json", [{"id": "1", "v": "x"}])
    first = make("run", f"DATA={data}", f"WORKDIR={work}")
    assert first.returncode == 0, first.stderr[-3000:]
    # Given a second run, paused with its batch committed, while someone else changes the table:
    # v, a string column, becomes a long one (a type no string batch can merge into)
    write(data / "b.json", [{"id": "2", "v": "y"}])
    marker, resume = tmp_path / "paused", tmp_path / "resume"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MAKE")},
        "INGEST_PAUSE": "after-commit-record:300",
        "INGEST_PAUSE_MARKER": str(marker),
        "INGEST_PAUSE_UNTIL": str(resume),
    }
    run = subprocess.Popen(
        ["make", "-s", "--no-print-directory", "run", f"DATA={data}", f"WORKDIR={work}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), run.communicate()[1][-3000:]
        table = open_catalog(f"sqlite:///{work / 'output/_catalog/catalog.db'}").load_table(("ingest", "events"))
        with table.update_schema() as update:
            update.delete_column("v")
        with table.update_schema() as update:
            update.add_column("v", LongType())
    finally:
        resume.touch()
    out, err = run.communicate(timeout=600)
    # Then the summary names the file as not published, with the table's reason
    assert "your files: 1 new; 0 loaded (0 rows), 1 not published" in out, out + err[-3000:]
    assert f"not published      {data / 'b.json'}  table events refused the batch" in out
    assert "v: string in the file, long in the table" in out
    # and the command exits 1 (make reports it as Error 1, and exits 2 itself), saying what to do
    assert re.search(r"^make: \*\*\* \[Makefile:\d+: run\] Error 1$", err, re.M), err[-3000:]
    assert run.returncode == 2
    assert (
        f"error: 1 file loaded but not published: the table refused their rows (above). Fix the cause, then make "
        f"reconcile WORKDIR={work} REQUEUE=1" in err
    )
    assert "Traceback" not in out + err
