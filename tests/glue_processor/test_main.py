"""The job script's Glue branch: arguments resolved as awsglue resolves them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from glue_processor import main

STUB = Path(__file__).resolve().parents[1] / "infra" / "glue_stub"


@pytest.mark.spark
def test_job_name_first_in_argv_is_resolved(spark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Given awsglue (the stand-in with getResolvedOptions' semantics: it parses args[1:])
    monkeypatch.syspath_prepend(str(STUB))
    for name in [m for m in sys.modules if m == "awsglue" or m.startswith("awsglue.")]:
        monkeypatch.delitem(sys.modules, name)
    ran: list[Any] = []
    monkeypatch.setattr(main, "run_query", lambda session, settings: ran.append(settings))
    argv = ["--JOB_NAME", "ingest-streaming", "--job-bookmark-option", "job-bookmark-disable"]
    for name in ("manifest_uri", "output_uri", "quarantine_uri", "checkpoint_uri"):
        argv += [f"--{name}", (tmp_path / name).as_uri()]
    # When Glue runs the script with --JOB_NAME as its first argument
    assert main.run(argv, script="main.py") == 0
    # Then the job ran with our settings (the old code handed argv[1:] on and lost --JOB_NAME)
    assert [s.manifest_uri for s in ran] == [(tmp_path / "manifest_uri").as_uri()]


def test_start_up_objects_are_frozen_once_per_process() -> None:
    """``freeze_start_up`` takes what is alive before the first trigger out of the cyclic collector,
    once: a second query of the same process (a replan, a new generation) freezes nothing more. At
    exit they are handed back: DuckDB (the local runner's) counts its objects alive at exit, and
    reported frozen ones as leaked."""
    import subprocess

    script = (
        "import gc\n"
        "import duckdb\n"
        "from glue_processor.main import freeze_start_up\n"
        "duckdb.connect().sql('select 1::INTEGER as a').fetchall()\n"
        "kept = [[n] for n in range(1000)]\n"
        "assert gc.get_freeze_count() == 0\n"
        "freeze_start_up(); first = gc.get_freeze_count()\n"
        "later = [[n] for n in range(1000)]\n"
        "freeze_start_up()\n"
        "print(first, gc.get_freeze_count())\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True)
    first, second = map(int, out.stdout.split())
    assert first >= 1000  # the start-up's objects, the list made before included
    assert second == first
    assert "leaked" not in out.stderr, out.stderr
