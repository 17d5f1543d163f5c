"""A newcomer's first hour, through the Makefile targets they type (issue "A newcomer's first hour").

One messy tree of their own (a field called ``filename``, keys ``name`` and ``Name``, a bad line, a
truncated gzip, a ``.txt`` beside the data, a non-ASCII key), fed by ``make run`` once; then what they
do next: ``make query`` (the README's SQL as printed), ``make reconcile``, ``make metrics``,
``make status``, a rerun with nothing new, and the mistakes people make. Every promise of the README
about these is asserted here on what the commands print and exit with.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


# make's own variables: under make test they carry its command line's (make test TEST_WORKERS=3
# FORMAT=csv) into every make a test runs, as if the test had typed them; each make here starts clean
OUTER_MAKE = ("MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL", "TEST_WORKERS")


def make(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in OUTER_MAKE}
    return subprocess.run(
        ["make", "-s", "--no-print-directory", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**clean, **(env or {})},
    )


def user_error(out: subprocess.CompletedProcess[str]) -> str:
    """A mistake of the user's: exit 2, one line of ours on stderr (and make's own), no traceback."""
    assert out.returncode == 2, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout
    # make's own line names the recipe (make[1]: when make runs under make, as in make test)
    ours = [line for line in out.stderr.splitlines() if line and not re.match(r"make(\[\d+\])?: ", line)]
    assert len(ours) == 1 and ours[0].startswith("error: "), out.stderr
    return ours[0]


def write(path: Path, records: list[Any], *, raw: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records) + raw)


@pytest.fixture(scope="module")
def messy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("first-hour")
    data, work = base / "my data", base / "work"
    write(
        data / "orders.ndjson",
        [{"id": i, "filename": f"f{i}.csv", "name": "lower", "custid": i % 3, "k" * 200: i} for i in range(20)],
        raw=b"{not json\n",
    )
    write(data / "people/ünïcödé.json", [{"id": 100, "Name": "Upper"}])
    body = b"".join(json.dumps({"id": 200 + i, "pad": "x" * 80}).encode() + b"\n" for i in range(500))
    whole = gzip.compress(body)
    (data / "logs").mkdir()
    (data / "logs/cut.ndjson.gz").write_bytes(whole[: len(whole) // 2])
    (data / "notes.txt").write_text("not data\n")
    # README: "hidden files and folders, `.`-first, are skipped locally" (an editor's copy, a clone's .git)
    write(data / ".orders.ndjson.swp", [{"id": 900}])
    write(data / ".git/objects/a.json", [{"id": 901}])
    first = make("run", f"DATA={data}", f"WORKDIR={work}")
    assert first.returncode == 0, first.stderr[-3000:]
    return {"data": data, "work": work, "first": first}


def test_the_summary_leads_with_what_happened_to_each_file(messy: dict[str, Any]) -> None:
    out, data = messy["first"].stdout, messy["data"]
    assert "Traceback" not in messy["first"].stderr
    assert not [line for line in messy["first"].stderr.splitlines() if "WARN" in line], messy["first"].stderr
    lines = out.splitlines()
    # one progress line per batch, then the files: counts, then each thing to know with its path
    sized = r"[\d.,]+ [kM]?B"
    assert any(re.match(rf"batch 0: 3 of 3 files, {sized} of {sized}, [\d,]+ rows, [\d.]+ s$", x) for x in lines), out
    headline = next(x for x in lines if x.startswith("your files:"))
    # each file counted once: 2 loaded whole + 1 in part + 1 ignored = 4 new
    assert headline.startswith("your files: 4 new; 2 loaded (")
    assert "1 loaded in part" in headline and "1 ignored" in headline and "1 line quarantined" in headline
    assert f"line quarantined   {data / 'orders.ndjson'}:21  malformed JSON" in out
    assert f"loaded in part     {data / 'logs/cut.ndjson.gz'}" in out
    assert f"ignored            {data / 'notes.txt'}" in out
    assert ".git" not in out and ".swp" not in out  # skipped: neither fed, nor counted, nor named
    # the key that lost its name says so where it happens
    # "name" (20 rows) and "Name" (1), both new: "name" keeps the column, "Name" is in _extra, and the
    # line's query lists the keys _extra holds (a newcomer's one stray "Kind" named "kind" kind__2)
    assert "column name__2" not in out
    line = next(x for x in lines if x.lstrip().startswith("values in _extra"))
    assert "another case of a column's key" in line, line
    listed = make("query", *shlex.split(line.split("their keys: make query ", 1)[1]), "FORMAT=csv")
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.splitlines()[1:]) == ["Name", "k" * 200]
    assert "table ingest.events:" in out and "each (source, line) once" in out
    # the metrics are behind make metrics, not in the summary
    assert "RecordsIn" not in out


def test_every_count_agrees_on_a_file_read_in_part(messy: dict[str, Any]) -> None:
    work = messy["work"]
    datums = [json.loads(x) for x in (work / "metrics.jsonl").read_text().splitlines()]

    def total(name: str) -> float:
        return sum(d["value"] for d in datums if d["name"] == name and "Table" not in d["dimensions"])

    # the truncated gzip has a file quarantine record, so it is counted as an object not read whole
    assert total("UnreadableObjects") == 1
    assert total("ObjectsIgnored") == 1  # the .txt
    records = [json.loads(p.read_text()) for p in (work / "output/_commits").glob("*/*.json")]
    assert sum(r["stats"].get("partial_files", 0) for r in records) == 1
    kinds = [
        json.loads(line)["kind"] for p in (work / "quarantine").rglob("*.json") for line in p.read_text().splitlines()
    ]
    assert sorted(kinds) == ["file", "line"]
    shown = make("metrics", f"WORKDIR={work}")
    assert shown.returncode == 0 and re.search(r"UnreadableObjects\s+job\s+Count\s+1\s+1", shown.stdout), shown.stdout
    # the run's feed is the run's too: the manifest builder's datums are shown (ObjectsIgnored: the
    # .txt), and the header's count adds up to the rows' n and the per-table datums it leaves out
    assert re.search(r"ObjectsIgnored\s+manifest-lambda\s+Count\s+1\s", shown.stdout), shown.stdout
    head = re.match(r"([\d,]+) datums of the last run ", shown.stdout)
    hidden = re.search(r"\(([\d,]+) of them per table", shown.stdout.splitlines()[0])
    assert head is not None and hidden is not None, shown.stdout
    ns = [int(m) for m in re.findall(r"^\S+\s+(?:job|manifest-lambda)\s+\S+\s+(\d+)\s", shown.stdout, re.M)]
    assert int(head.group(1).replace(",", "")) == sum(ns) + int(hidden.group(1).replace(",", "")), shown.stdout


def test_the_quarantine_is_a_table_make_query_reads(messy: dict[str, Any]) -> None:
    # Issue 47: every quarantine record a row of ingest.quarantine, as the README's query shows it
    work = messy["work"]
    sql = "SELECT table_name, key, line, kind, reason, raw FROM quarantine ORDER BY kind"
    shown = make("query", f"WORKDIR={work}", "FORMAT=csv", f"SQL={sql}")
    assert shown.returncode == 0, shown.stderr
    rows = list(csv.DictReader(shown.stdout.splitlines()))
    assert [r["kind"] for r in rows] == ["file", "line"], rows
    file, line = rows
    assert line["table_name"] == "ingest.events" and line["key"] == "orders.ndjson" and line["line"] == "21"
    assert line["reason"].startswith("malformed JSON") and line["raw"] == "{not json"
    assert file["key"] == "logs/cut.ndjson.gz" and file["line"] == ""
    # as many rows as records in the quarantine files, each once
    records = [x for p in (work / "quarantine").rglob("*.json") for x in p.read_text().splitlines()]
    counted = make("query", f"WORKDIR={work}", "FORMAT=csv", "SQL=SELECT count(*) AS n FROM ingest.quarantine")
    assert counted.stdout.splitlines()[1:] == [str(len(records))], counted.stdout


def test_make_query_works_whatever_the_column_names(messy: dict[str, Any]) -> None:
    work = messy["work"]
    one = make("query", f"WORKDIR={work}", "SQL=SELECT 1 AS one")
    assert one.returncode == 0 and one.stdout.splitlines()[:3] == ["one", "---", "1"], one.stderr
    named = make("query", f"WORKDIR={work}", "FORMAT=csv", "SQL=SELECT filename FROM events WHERE id = '3'")
    assert named.returncode == 0 and named.stdout.splitlines() == ["filename", "f3.csv"], named.stderr
    # a map prints as a map, not as Python tuples
    extra = make("query", f"WORKDIR={work}", "FORMAT=csv", "SQL=SELECT _extra FROM events WHERE id = '0'")
    assert extra.returncode == 0, extra.stderr
    ((cell,),) = list(csv.reader(extra.stdout.splitlines()[1:]))
    assert json.loads(cell) == {"k" * 200: "0"}  # the key too long to be a column, in _extra
    # files and snapshots beside partitions (and under meta., which a table of the user's never hides)
    for view in ("partitions", "files", "snapshots", "meta.files"):
        listed = make("query", f"WORKDIR={work}", "FORMAT=csv", f"SQL=SELECT count(*) AS n FROM {view}")
        assert listed.returncode == 0 and int(listed.stdout.splitlines()[1]) >= 1, (view, listed.stderr)


def test_the_readmes_queries_run_locally_as_printed(messy: dict[str, Any]) -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sql\n(.*?)```", readme, re.S)
    assert len(blocks) >= 2
    for block in blocks:  # each block whole, as a user pastes it
        out = make("query", f"WORKDIR={messy['work']}", f"SQL={block}")
        assert out.returncode == 0, (block, out.stderr)
        assert len(re.findall(r"^\((\d+) rows\)$", out.stdout, re.M)) == block.count(";"), out.stdout


def test_reconcile_accounts_for_everything_and_prints_keys_as_they_are(messy: dict[str, Any]) -> None:
    out = make("reconcile", f"WORKDIR={messy['work']}")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["landed"] == report["ingested"] == 3
    assert "ünïcödé" in out.stdout or report["never_ingested"] == []


def test_compact_says_why_it_compacted_nothing(messy: dict[str, Any]) -> None:
    out = make("compact", f"WORKDIR={messy['work']}")
    assert out.returncode == 0, out.stderr
    # one batch wrote one file in today's partition: nothing to pack, and it says so
    assert "ingest.events: nothing to compact: no partition has two small files to pack together" in out.stdout
    assert "snapshot None" not in out.stdout


def test_a_rerun_with_nothing_new_feeds_the_same_tree_and_starts_no_spark(messy: dict[str, Any]) -> None:
    work = messy["work"]
    again = make("run", f"WORKDIR={work}")  # no DATA: the WORKDIR remembers its tree
    assert again.returncode == 0, again.stderr
    assert f"nothing new in {messy['data']} since the last run" in again.stdout
    assert "running the streaming job" not in again.stdout
    assert not (work / "sample").exists()  # never a generated sample in a WORKDIR fed from a tree
    # and make status says nothing waits
    status = make("status", f"WORKDIR={work}")
    assert status.returncode == 0 and "manifests waiting: 0" in status.stdout, status.stdout
    # and its dry-run's "start" is the 24/7 keep-alive, said so (it read as a start for nothing)
    assert "dry-run decision: start" in status.stdout and "keeps the streaming job running 24/7" in status.stdout


def test_mistakes_are_one_line_and_exit_2(messy: dict[str, Any], tmp_path: Path) -> None:
    work, data = messy["work"], messy["data"]
    other = tmp_path / "other"
    other.mkdir()
    msg = user_error(make("run", f"WORKDIR={work}", f"DATA={other}"))
    assert f"is fed from {data}" in msg
    assert "no table here" in user_error(make("query", f"WORKDIR={tmp_path / 'typo'}"))
    assert "SQL:" in user_error(make("query", f"WORKDIR={work}", "SQL=SELEC 1"))
    assert "SCHEMA=" in user_error(make("run", f"WORKDIR={tmp_path / 'w1'}", f"DATA={data}", "SCHEMA=nope.json"))
    assert "ROUTES=" in user_error(make("run", f"WORKDIR={tmp_path / 'w2'}", f"DATA={data}", "ROUTES=nope.yaml"))
    (tmp_path / "bad.json").write_text('{"columns": {"ts": "timestamp",}}')
    assert "bad.json: not JSON" in user_error(
        make("run", f"WORKDIR={tmp_path / 'w5'}", f"DATA={data}", f"SCHEMA={tmp_path}/bad.json")
    )
    assert "not a directory" in user_error(make("run", f"WORKDIR={tmp_path / 'w3'}", f"DATA={tmp_path / 'none'}"))
    assert not (tmp_path / "w3").exists()  # a DATA typo leaves no WORKDIR behind
    assert "glob" in user_error(make("run", f"WORKDIR={tmp_path / 'w[1]'}", f"DATA={data}"))
    (tmp_path / "a file").write_text("")
    assert "cannot be used" in user_error(make("run", f"WORKDIR={tmp_path / 'a file'}", f"DATA={data}"))
    assert "not a declared column" in user_error(
        make("run", f"WORKDIR={tmp_path / 'w4'}", f"DATA={data}", "PARTITION_BY=custid")
    )
    # a setting's mistake leaves no WORKDIR behind either: the next run, with the typo fixed, is a first run
    assert [w for w in ("w1", "w2", "w4", "w5") if (tmp_path / w).exists()] == []
    assert "no local run here" in user_error(make("reconcile", f"WORKDIR={tmp_path / 'typo'}"))
    assert "no metrics.jsonl" in user_error(make("metrics", f"WORKDIR={tmp_path / 'typo'}"))
    assert "error: WORKDIR=" in user_error(make("status", f"WORKDIR={tmp_path / 'typo'}"))
    assert "no Iceberg table here" in user_error(make("compact", f"WORKDIR={tmp_path / 'typo'}"))
    hive = tmp_path / "hive" / "state"  # a WORKDIR make run kept as hive-parquet (not "run make run first")
    hive.mkdir(parents=True)
    (hive / "table.json").write_text('{"table_format": "hive-parquet"}')
    assert "holds a hive-parquet table: make compact packs Iceberg tables only" in user_error(
        make("compact", f"WORKDIR={hive.parent}")
    )
    # DEBUG=1 shows where it was raised
    debug = make("query", f"WORKDIR={tmp_path / 'typo'}", env={"DEBUG": "1"})
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_make_query_as_the_run_prints_it_works_on_a_table_with_no_row_yet(tmp_path: Path) -> None:
    # Given a first run whose every line is bad (a newcomer's day one): the table has no snapshot
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "bad.ndjson", [], raw=b'{"a" 1}\n')
    (data / "empty.ndjson").write_bytes(b"")
    first = make("run", f"DATA={data}", f"WORKDIR={work}", "CORES=4096")  # (and more cores than it has: said)
    assert first.returncode == 0 and "table ingest.events: 0 rows in 0 Parquet files" in first.stdout, first.stderr
    assert f"(4096 cores, more than this machine's {os.cpu_count()}: its tasks take turns)" in first.stdout
    # When the query the run suggests runs as printed, Then it lists no partition (it failed on
    # "SQL: Binder Error" though no SQL was given: an empty table was taken for a hive-parquet one)
    for args in ((), ("SQL=SELECT * FROM files",), ("SQL=SELECT count(*) AS n FROM quarantine",)):
        out = make("query", f"WORKDIR={work}", *args)
        assert out.returncode == 0, (args, out.stderr)
    assert make("query", f"WORKDIR={work}").stdout.splitlines()[0].split() == [
        "table",
        "partition",
        "spec_id",
        "rows",
        "files",
        "mb",
    ]


def test_changing_partition_by_evolves_the_spec_in_place(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "a.json", [{"id": i, "custid": i % 2, "ts": f"2026-01-0{1 + i % 3}T00:00:00Z"} for i in range(6)])
    types = tmp_path / "types.json"
    types.write_text(json.dumps({"columns": {"custid": "bigint", "ts": "timestamp"}}))
    first = make("run", f"DATA={data}", f"WORKDIR={work}", f"SCHEMA={types}", "PARTITION_BY=custid")
    assert first.returncode == 0, first.stderr[-3000:]
    # a bare rerun keeps the WORKDIR's partitioning and types (it must not repartition the table)
    write(data / "c.json", [{"id": 20, "custid": 1, "ts": "2026-01-05T00:00:00Z"}])
    bare = make("run", f"WORKDIR={work}")
    assert bare.returncode == 0, bare.stderr[-3000:]
    assert "using this WORKDIR's PARTITION_BY='custid' and SCHEMA=" in bare.stdout
    write(data / "b.json", [{"id": 10 + i, "custid": 5, "ts": "2026-02-01T00:00:00Z"} for i in range(4)])
    second = make("run", f"WORKDIR={work}", "PARTITION_BY=day(ts)")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Traceback" not in second.stderr
    from glue_processor.table.catalog import open_catalog

    table = open_catalog(f"sqlite:///{work / 'output/_catalog/catalog.db'}").load_table(("ingest", "events"))
    assert [f.name for f in table.spec().fields] == ["ts_day"]
    files = table.inspect.files().to_pylist()
    by_spec: dict[int, list[dict[str, Any]]] = {}
    for f in files:
        by_spec.setdefault(f["spec_id"], []).append(f)
    assert len(by_spec) == 2  # the old files as they were, the new under the new spec
    assert sorted(int(r["id"]) for r in table.scan().to_arrow().to_pylist()) == [*range(6), *range(10, 14), 20]
    new = by_spec[table.spec().spec_id]
    assert sum(f["record_count"] for f in new) == 4
    # (the files' partition struct spans both specs: a field of the other spec is null)
    assert all(f["partition"]["ts_day"] is not None and f["partition"].get("custid") is None for f in new)
    old = [f for spec, fs in by_spec.items() if spec != table.spec().spec_id for f in fs]
    assert sorted(f["partition"]["custid"] for f in old) == [0, 1, 1]


def test_reconcile_counts_what_the_routing_ignores_as_accounted(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "orders/1.json", [{"id": 1}])
    write(data / "elsewhere/2.json", [{"id": 2}])
    routes = tmp_path / "routes.yaml"
    routes.write_text("tables:\n  files: {}\nroutes:\n  - {prefix: orders/, table: files}\nunmatched: ignore\n")
    assert make("run", f"DATA={data}", f"WORKDIR={work}", f"ROUTES={routes}").returncode == 0
    out = make("reconcile", f"WORKDIR={work}")
    assert out.returncode == 0, out.stdout
    report = json.loads(out.stdout)
    assert (report["ingested"], report["ignored"], report["never_ingested"]) == (1, 1, [])
    # a table called as a metadata view keeps its name in make query; the view is meta.files
    rows = make("query", f"WORKDIR={work}", "FORMAT=csv", "SQL=SELECT id FROM files")
    assert rows.returncode == 0 and rows.stdout.splitlines() == ["id", "1"], rows.stdout + rows.stderr


def shape(line: str, workdir: str) -> str:
    """A printed line with what varies from run to run (numbers, the WORKDIR) taken out."""
    return re.sub(r"\d[\d,.]*", "#", line.replace(workdir, ".work"))


def test_the_readmes_sample_output_is_what_make_run_prints(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```\n(WORKDIR=\.work is new .*?)\n```", readme, re.S)
    assert block is not None, "the README shows make run's output"
    work = tmp_path / "work"
    out = make("run", f"WORKDIR={work}")
    assert out.returncode == 0, out.stderr[-3000:]
    printed = [line for line in out.stdout.splitlines() if not line.startswith(("setting up", "JAVA_HOME"))]
    assert [shape(x, str(work)) for x in printed] == [shape(x, ".work") for x in block.group(1).splitlines()]


def test_a_late_file_is_named_as_it_is_backfilled_waiting_then_loaded(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write(data / "a.json", [{"id": 1}])
    assert make("run", f"DATA={data}", f"WORKDIR={work}").returncode == 0
    # Given a file that landed with no event (written straight into the tree, never fed)
    write(data / "late/späť.json", [{"id": 2}])
    # Then reconcile says it was never loaded, by its own name (not escaped), with exit code 3 (make
    # itself exits 2 on any failed recipe, naming the recipe's code)
    missing = make("reconcile", f"WORKDIR={work}")
    assert missing.returncode == 2 and "reconcile] Error 3" in missing.stderr, missing.stdout + missing.stderr
    assert "s3://local-landing/late/späť.json" in missing.stdout
    direct = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-m", "glue_processor.local.reconcile", "--workdir", str(work)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert direct.returncode == 3, direct.stderr
    # When it is backfilled, the command says what loads it, and make status counts it waiting
    filled = make("backfill", f"WORKDIR={work}", "INVENTORY=1")
    assert filled.returncode == 0, filled.stderr
    assert f"load them with: make run WORKDIR={work}" in filled.stderr
    status = make("status", f"WORKDIR={work}")
    assert re.search(r"manifests waiting: 1 \([\d.]+ MB of data\); make run loads them", status.stdout), status.stdout
    # And make run loads it; everything is accounted for
    loaded = make("run", f"WORKDIR={work}")
    assert loaded.returncode == 0 and "your files: 0 new; 1 loaded (1 row)" in loaded.stdout, loaded.stdout
    assert make("reconcile", f"WORKDIR={work}").returncode == 0


def test_a_run_stopped_between_batches_leaves_the_rest_for_the_next_and_one_run_at_a_time(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    for n in range(6):
        write(data / f"{n}.json", [{"id": n}])
    cli = [str(ROOT / ".venv/bin/python"), "-m", "glue_processor.local.cli", "--data", str(data)]
    args = [*cli, "--workdir", str(work), "--max-files-per-trigger", "1", "--sqs-batch-size", "1"]
    # Given a run of six one-manifest batches, stopped (Ctrl-C) once its first batch is done
    run = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert run.stdout is not None
    for line in run.stdout:
        if line.startswith("running the streaming job"):
            # Then a second run on the same WORKDIR meanwhile is refused in one line
            second = make("run", f"WORKDIR={work}")
            assert "is in use by another make run" in user_error(second)
        if line.startswith("batch 0:"):
            run.send_signal(signal.SIGINT)
            break
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out
    # And the next run, with nothing new to feed, loads what the stopped one left (it did not skip it)
    rest = make("run", f"WORKDIR={work}")
    assert rest.returncode == 0, rest.stderr
    assert "nothing new" not in rest.stdout
    ids = make(
        "query", f"WORKDIR={work}", "FORMAT=csv", "SQL=SELECT count(DISTINCT id) AS n, count(*) AS rows FROM events"
    )
    assert ids.stdout.splitlines()[1] == "6,6", ids.stdout + rest.stdout + out


def test_make_test_runs_the_suite_on_the_processes_test_workers_names() -> None:
    # the README: make test runs the suite on two pytest processes, TEST_WORKERS=N sets how many
    # (make -n prints the recipes; only the sub-makes run, dry as well)
    readme = (ROOT / "README.md").read_text()
    assert "two pytest processes" in readme and "`TEST_WORKERS=N`" in readme
    for given, workers in ((), "2"), (("TEST_WORKERS=3",), "3"):
        out = make("-n", "test", *given)
        assert out.returncode == 0, out.stderr[-2000:]
        suite = [line for line in out.stdout.splitlines() if line.startswith(".venv/bin/python -m pytest -q -n")]
        assert suite == [f".venv/bin/python -m pytest -q -n {workers}"], out.stdout[-2000:]
