"""`make run`'s code path end to end, in a subprocess as a user runs it."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from contracts import metrics as M
from tests.helpers import read_rows

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def run_local(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "glue_processor.local.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_tree(root: Path, files: dict[str, list[dict[str, Any]]]) -> None:
    for rel, records in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
        path.write_bytes(gzip.compress(body) if rel.endswith(".gz") else body)


def lineage(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return sorted((r["_source_uri"], r["_line"]) for r in rows)


def test_user_tree_is_ingested_then_only_new_files(tmp_path: Path) -> None:
    data, work = tmp_path / "my data", tmp_path / "work dir ü+%"
    files = {
        "a/with space.json": [{"id": i, "v": {"n": i}} for i in range(5)],
        "a/ünïcödé+plus%.ndjson": [{"id": 100 + i} for i in range(3)],
        "b/c/deep.jsonl.gz": [{"id": 200 + i, "s": "x"} for i in range(4)],
        "b/2026-11-22T10:00:00.json": [{"id": 400}],  # a ':' in the name, as timestamped producers write
        "b/ignored.csv": [{"id": -1}],
    }
    write_tree(data, files)

    first = run_local(
        "--data", str(data), "--workdir", str(work), "--sqs-batch-size", "1", "--max-files-per-trigger", "1"
    )
    assert first.returncode == 0, first.stderr[-3000:]
    # the summary leads with the user's files: four loaded, the .csv named as ignored
    assert "your files: 5 new; 4 loaded (13 rows), 1 ignored" in first.stdout, first.stdout
    assert f"ignored            {data / 'b/ignored.csv'}" in first.stdout
    assert "table ingest.events: 13 rows in" in first.stdout and "each (source, line) once" in first.stdout

    # metrics.jsonl holds every family the job and the manifest Lambda publish, and adds up
    datums = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    names = {d["name"] for d in datums}
    expected = {m.name for m in M.ALL if m.source in (M.Source.JOB, M.Source.MANIFEST_LAMBDA)}
    assert expected <= names, expected - names
    assert sum(d["value"] for d in datums if d["name"] == "RecordsIn" and "Table" not in d["dimensions"]) == 13
    # and each table's series too (one table here: events)
    assert (
        sum(d["value"] for d in datums if d["name"] == "RecordsIn" and d["dimensions"].get("Table") == "events") == 13
    )
    assert sum(d["value"] for d in datums if d["name"] == "ObjectsPerManifest") == 4

    # make status explains what the control plane would do
    status = subprocess.run(
        [sys.executable, "-m", "glue_processor.local.status", "--workdir", str(work)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert "job: STOPPED" in status.stdout and "dry-run decision: start -> 2 workers" in status.stdout

    rows = read_rows(work / "output")
    want = sorted(
        (f"s3://local-landing/{rel}", n + 1)
        for rel, recs in files.items()
        if not rel.endswith(".csv")
        for n in range(len(recs))
    )
    assert lineage(rows) == want
    assert sorted(int(r["id"]) for r in rows) == sorted(r["id"] for k, v in files.items() if ".csv" not in k for r in v)
    assert {r["v"] for r in rows if r.get("v")} == {json.dumps({"n": i}, separators=(",", ":")) for i in range(5)}

    # Given one more file, When run again, Then only it is processed
    write_tree(data, {"a/new.json": [{"id": 300}]})
    second = run_local("--data", str(data), "--workdir", str(work))
    assert second.returncode == 0, second.stderr[-3000:]
    assert "fed 1 new file (" in second.stdout and "your files: 1 new; 1 loaded (1 row)" in second.stdout
    assert "ended without finishing" not in second.stdout  # the first run finished: nothing resumed
    assert len(read_rows(work / "output")) == 14


def test_kill_9_mid_run_then_resume_gives_each_record_once(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    files = {f"f{i:03d}.json": [{"id": i * 100 + j} for j in range(50)] for i in range(24)}
    write_tree(data, files)
    for rel in files:  # and a malformed last line in each: a quarantine record (line 51) per file
        with (data / rel).open("ab") as f:
            f.write(b"{not json\n")
    # and an object that is no gzip (quarantined whole), and a manifest that is no manifest
    (data / "broken.json.gz").write_bytes(b"not gzip at all")
    from glue_processor.local.layout import LocalLayout

    manifests = LocalLayout(work).manifests
    manifests.mkdir(parents=True)
    (manifests / "0-not-a-manifest.json").write_text("{not json")
    # and a rule the ids from 2000 on break (files f020-f023): a quarantine row each (issue 47)
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"below_2000": "id NOT LIKE '2___'"}))
    args = ["--data", str(data), "--workdir", str(work), "--sqs-batch-size", "2", "--max-files-per-trigger", "1"]
    args += ["--expect", str(rules)]

    proc = subprocess.Popen(
        [sys.executable, "-m", "glue_processor.local.cli", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    commits = work / "output" / "_commits"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if commits.exists() and sum(1 for _ in commits.rglob("*.json")) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    resumed = run_local(*args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "ended without finishing (killed or crashed): resuming from its checkpoint" in resumed.stdout
    rows = read_rows(work / "output")
    kept = {rel: recs for rel, recs in files.items() if rel < "f020"}
    want = sorted((f"s3://local-landing/{rel}", n + 1) for rel, recs in kept.items() for n in range(len(recs)))
    assert lineage(rows) == want  # nothing lost, nothing twice
    assert sorted(int(r["id"]) for r in rows) == sorted(r["id"] for recs in kept.values() for r in recs)
    # every quarantined line, object, manifest and row that broke the rule a row of the quarantine
    # table, once
    from glue_processor.local.query import connect

    sql = "SELECT coalesce(key, ''), coalesce(line, 0), kind, rule FROM quarantine ORDER BY 1, 2, 3"
    quarantined = connect(work / "output").execute(sql).fetchall()
    broke = [(rel, n + 1, "rule", "below_2000") for rel, recs in files.items() if rel >= "f020" for n in range(50)]
    whole = [("", 0, "manifest", None), ("broken.json.gz", 0, "file", None)]
    assert quarantined == sorted([(rel, 51, "line", None) for rel in files] + broke + whole, key=lambda r: r[:3])


def test_checkpoint_generations_rotate_without_loss_or_duplicates(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    files = {f"g{i}.json": [{"id": i * 10 + j} for j in range(3)] for i in range(7)}
    write_tree(data, files)
    out = run_local(
        "--data", str(data), "--workdir", str(work), "--sqs-batch-size", "1", "--checkpoint-rotate-manifests", "2"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    generations = sorted(p.name for p in (work / "checkpoint").iterdir() if p.name.startswith("gen-"))
    # At least one rotation. How many depends on timing: available-now runs batches back to back and
    # stops a full generation "soon" (2 s), so a fast run can fit more than 2 manifests in one.
    assert len(generations) >= 2, generations
    # the summary counts every generation's batches (the run keeps their records, not their jobs)
    assert "your files: 7 new; 7 loaded (21 rows)" in out.stdout, out.stdout
    rows = read_rows(work / "output")
    want = sorted((f"s3://local-landing/{rel}", n + 1) for rel, recs in files.items() for n in range(len(recs)))
    assert lineage(rows) == want  # each record once across generations
    archived = list((work / "buckets" / "local-manifests" / "archive").rglob("*.json"))
    assert archived, "processed manifests are archived out of the listed prefix"


def test_two_job_processes_on_one_checkpoint_publish_every_record_once(tmp_path: Path) -> None:
    # Given two runs of the job on one workdir (one checkpoint, one output), as when an operator
    # starts a run while another is still stopping: the first is slow, it has staged its batch and
    # not committed it yet when the second starts
    data, work = tmp_path / "data", tmp_path / "work"
    files = {f"f{i}.json": [{"id": i * 100 + j} for j in range(20)] for i in range(3)}
    write_tree(data, files)
    marker, resume = tmp_path / "slow-run-paused", tmp_path / "slow-run-resumes"
    args = [sys.executable, "-m", "glue_processor.local.cli", "--data", str(data), "--workdir", str(work)]
    args += ["--sqs-batch-size", "3", "--cores", "1"]

    def start(**extra: str) -> subprocess.Popen[str]:
        env = {**os.environ, "INGEST_TWO_RUNS": "1", **extra}
        return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    # (paused until the second run has ended, however long its start takes on a loaded machine)
    slow = start(INGEST_PAUSE="after-stage:300", INGEST_PAUSE_MARKER=str(marker), INGEST_PAUSE_UNTIL=str(resume))
    fast: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and slow.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), slow.communicate()[1][-3000:]
        # When the second run re-runs the same batch and commits it while the first is still staging
        fast = start()
        _fast_out, fast_err = fast.communicate(timeout=300)
        resume.touch()
        slow_out, slow_err = slow.communicate(timeout=300)
    finally:  # a failed test leaves no run behind (the slow one would sleep out its 300 s)
        resume.touch()
        for run in (slow, fast):
            if run is not None and run.poll() is None:
                run.kill()
                run.communicate()
    # Then the second run published, the first was fenced out and ended without publishing
    assert fast.returncode == 0, fast_err[-3000:]
    assert slow.returncode == 0, slow_err[-3000:]
    assert "fenced out by another run" in slow_err + slow_out
    # And every record is in the output exactly once
    want = sorted((f"s3://local-landing/{rel}", n + 1) for rel, recs in files.items() for n in range(len(recs)))
    assert lineage(read_rows(work / "output")) == want
