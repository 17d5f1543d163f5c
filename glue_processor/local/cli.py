"""``make run``: the whole pipeline on one machine, local directories standing in for S3.

1. The landing bucket is the user's tree (``--data``, remembered by the WORKDIR) or a generated
   sample (in a WORKDIR of its own).
2. Each new file goes through the manifest builder as the S3 -> SQS event it would produce.
3. The streaming job runs on local Spark until every manifest is processed, then stops, printing a
   line per batch; with nothing new to do, Spark is not started at all.
4. A summary says what happened to the user's files, then what the tables hold.

Run it again on the same WORKDIR and only new files are processed; after a crash (even
``kill -9``) it resumes from the checkpoint without loss or duplicates.
"""

from __future__ import annotations

import signal

# make run: a Ctrl-C while the modules below load (a second or more) is kept, and said in one line
# once main() is ready to. Raised in the middle of an import it printed a traceback, or an import
# that catches broadly swallowed it and the run went on (a CI run of the Ctrl-C test loaded it all).
_PRESSED: list[int] = []


def _keep(signum: int, _frame: object) -> None:
    _PRESSED.append(signum)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, _keep)

import argparse
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from contracts.exceptions import ConfigError
from contracts.layout import manifest_data_bytes
from contracts.ledger import CommitRecord
from contracts.routing import parse_routing
from glue_processor.local import runs
from glue_processor.local.errors import Parser, cli, user_path
from glue_processor.local.feeder import Feeder, FeedResult
from glue_processor.local.layout import MANIFEST_BUCKET, MANIFEST_PREFIX, LocalLayout, local_uri
from glue_processor.local.sample import generate
from glue_processor.local.source import DataSource, check_data, choose, remember
from glue_processor.local.summary import RunReport, TableState, quarantine_records, render, shown, size
from glue_processor.local.text import counted
from glue_processor.metrics.sinks import JsonlSink
from glue_processor.plan.routes import load_routes
from glue_processor.settings import JobSettings, settings_from_mapping
from glue_processor.shared.rules import misnamed
from lambdas.manifest_builder.settings import load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from glue_processor.commit.publisher import Settlement

logger = logging.getLogger("ingest-local")
NOT_PUBLISHED = 1  # the run ended, but a table refused some of its files: they are not in it
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as a shell reports it
# the latest batches' commit records the run's summary reads (a 24/7 run must not grow with them:
# a record of a batch of 1,667 objects is ~2.9 MB in memory)
RECORDS_KEPT = 1000


def _cores(value: str) -> str:
    if value == "*" or (value.isdigit() and int(value) >= 1):
        return value
    raise argparse.ArgumentTypeError(f"a number of cores (1 or more) or *, not {value!r}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog="ingest-local", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", type=user_path, help="your NDJSON tree (.json/.ndjson/.jsonl/.gz); default: a sample")
    p.add_argument(
        "--workdir", type=user_path, default=Path(".work"), help="local stand-ins for the buckets (default .work)"
    )
    p.add_argument(
        "--cores",
        default="*",
        type=_cores,
        help="local Spark cores: a number, or * for all (default)",
    )
    p.add_argument("--sample-files", type=int, default=48, help="files in the generated sample (default 48)")
    p.add_argument("--sample-records", type=int, default=400, help="records per sample file (default 400)")
    p.add_argument(
        "--sqs-batch-size",
        type=int,
        default=1000,
        help="messages per manifest-builder invocation (default 1000, the stack's SqsBatchSize)",
    )
    p.add_argument("--max-manifest-files", type=int, default=1000, help="files per manifest (default 1000)")
    p.add_argument(
        "--max-files-per-trigger",
        type=int,
        default=None,
        help="manifests per micro-batch (default: the deployed job's, a 16 GiB byte budget; 1 for small demo batches)",
    )
    p.add_argument("--target-file-mb", type=int, default=128, help="target Parquet file size (default 128)")
    p.add_argument(
        "--trigger",
        choices=["available-now", "processing-time"],
        default="available-now",
        help="available-now: drain and stop (default); processing-time: run 24/7",
    )
    p.add_argument("--trigger-interval-seconds", type=int, default=30)
    p.add_argument("--partition-by", default="", help="Iceberg partitioning, e.g. day(ts),kind (default: ingest day)")
    p.add_argument(
        "--routes",
        type=user_path,
        help="a routing file (YAML or JSON, contracts/routing.py): key patterns to tables, each with its own "
        "columns, partitioning, file size and column bound; kept in WORKDIR for the next runs",
    )
    p.add_argument(
        "--schema", type=user_path, help="a declared-schema JSON file (column -> type); default: all strings"
    )
    p.add_argument(
        "--expect",
        type=user_path,
        help="a rules JSON file (rule name -> SQL, or -> {sql, on_fail}; glue_processor/shared/rules.py): what each "
        "record must keep; kept in WORKDIR for the next runs (EXPECT=default: none); with ROUTES, each table's expect",
    )
    p.add_argument(
        "--table-format",
        choices=["iceberg", "hive-parquet"],
        default=None,
        help="iceberg (default: a table in the embedded catalog) or hive-parquet (dt= directories); "
        "kept in WORKDIR for the next runs",
    )
    p.add_argument(
        "--on-overwrite",
        choices=["replace", "tail", "append"],
        help="a changed file: replace its rows (default), load only the lines it adds (tail), or keep both "
        "versions (append); kept in WORKDIR for the next runs",
    )
    p.add_argument(
        "--on-delete",
        choices=["keep", "retract"],
        help="a deleted file: its rows stay (keep, default) or go (retract); kept in WORKDIR for the next runs",
    )
    p.add_argument(
        "--checkpoint-rotate-manifests",
        type=int,
        default=20_000,
        help="new checkpoint generation after this many manifests (default 20000; 0: never)",
    )
    return p.parse_args(argv)


def routes_file(layout: LocalLayout, given: Path | None) -> Path | None:
    """The routing file of this WORKDIR: a given one is validated and kept there as JSON (what
    ``make deploy`` ships to S3); without one, the one kept by an earlier run, if any."""
    kept = layout.workdir / "routes.json"
    if given is None:
        return kept if kept.exists() else None
    if not given.is_file():
        raise ConfigError(f"ROUTES={given} is not a file: give the path of your routing file (docs/routing.md)")
    routing = parse_routing(given.read_bytes(), source=str(given))
    kept.write_bytes(routing.to_json())
    return kept


def job_settings(layout: LocalLayout, args: argparse.Namespace, routes: Path | None = None) -> JobSettings:
    from glue_processor.local.buckets import LocalBuckets

    return settings_from_mapping(
        {
            "manifest_uri": local_uri(layout.manifests),
            "output_uri": local_uri(layout.output),
            "quarantine_uri": local_uri(layout.quarantine),
            "checkpoint_uri": local_uri(layout.checkpoint),
            "manifest_archive_uri": local_uri(layout.buckets / MANIFEST_BUCKET / "archive"),
            "checkpoint_rotate_manifests": str(args.checkpoint_rotate_manifests),
            "source_uri_template": LocalBuckets(layout.buckets).uri_template(),
            "trigger": args.trigger,
            "trigger_interval_seconds": str(args.trigger_interval_seconds),
            **({"max_files_per_trigger": str(args.max_files_per_trigger)} if args.max_files_per_trigger else {}),
            "target_file_mb": str(args.target_file_mb),
            "table_format": args.table_format,
            **({"schema": local_uri(_schema_file(args.schema))} if args.schema else {}),
            **({"expect": local_uri(_expect_file(args.expect))} if args.expect else {}),
            **({"partition_by": args.partition_by} if args.partition_by else {}),
            **({"routes": local_uri(routes)} if routes else {}),
            **({"on_overwrite": args.on_overwrite} if args.on_overwrite else {}),
            **({"on_delete": args.on_delete} if args.on_delete else {}),
            "metrics_sinks": "jsonl",
            "metrics_jsonl_path": str(layout.metrics),
        }
    )


def visible_files(root: Path, suffix: str) -> list[Path]:
    """Files a reader (Spark, Athena) sees: no path part under ``root`` starts with '_' or '.'."""
    if not root.exists():
        return []
    return [
        p
        for p in root.rglob(f"*{suffix}")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)
    ]


def _table_settings(args: argparse.Namespace, layout: LocalLayout) -> dict[str, str]:
    """TABLE_FORMAT, PARTITION_BY and SCHEMA as this WORKDIR's table has them: given, they are
    what to remember (once they prove valid); not given, the remembered ones apply (a bare rerun must
    not start a second table, repartition the table or drop its types), said on one line.
    ``PARTITION_BY=default`` goes back to the ingest day, ``SCHEMA=default`` to string columns. The
    format of a table that holds data cannot change: a WORKDIR holds one table per name."""
    kept = layout.table_settings
    known = json.loads(kept.read_text(encoding="utf-8")) if kept.exists() else {}
    before = dict(known)
    used = []
    held = known.get("table_format") or _format_on_disk(layout)
    if args.table_format is None:
        args.table_format = held or "iceberg"
        if held == "hive-parquet":
            used.append(f"TABLE_FORMAT={held}")
    elif held and args.table_format != held:
        raise ConfigError(
            f"WORKDIR={args.workdir} holds {_a(held)} table; TABLE_FORMAT={args.table_format} would start a second "
            f"table beside it: give the {args.table_format} table a WORKDIR of its own"
        )
    known["table_format"] = args.table_format
    if args.partition_by == "default":
        args.partition_by = ""
        known.pop("partition_by", None)
    elif args.partition_by:
        known["partition_by"] = args.partition_by
    elif known.get("partition_by"):
        args.partition_by = known["partition_by"]
        used.append(f"PARTITION_BY='{args.partition_by}'")
    for name in ("on_overwrite", "on_delete"):
        given = getattr(args, name)
        if given:
            known[name] = given
        elif known.get(name):
            setattr(args, name, known[name])
            used.append(f"{name.upper()}={known[name]}")
    for name in ("schema", "expect"):
        given = getattr(args, name)
        if given is not None and str(given) == "default":
            setattr(args, name, None)
            known.pop(name, None)
        elif given is not None:
            known[name] = str(given.resolve())
        elif known.get(name):
            setattr(args, name, Path(known[name]))
            used.append(f"{name.upper()}={known[name]}")
    if used:
        print(f"using this WORKDIR's {' and '.join(used)} ({_how_to_change(used)})")
    if kept.exists():  # not a first run: a setting given anew is said, with what it does to the table
        for name in ("partition_by", "schema", "expect", "on_overwrite", "on_delete"):
            if before.get(name) != known.get(name):
                print(
                    f"this WORKDIR's {name.upper()} changes from {before.get(name) or 'the default'} to "
                    f"{known.get(name) or 'the default'}: batches from now on follow it; what earlier ones "
                    "loaded stays as it is"
                )
    return known


RESETS = {
    "PARTITION_BY": "PARTITION_BY=default",
    "SCHEMA": "SCHEMA=default",
    "EXPECT": "EXPECT=default",
    "ON_OVERWRITE": "ON_OVERWRITE=replace",
    "ON_DELETE": "ON_DELETE=keep",
}


def _how_to_change(used: list[str]) -> str:
    """How the settings a run reuses change: another value, and the reset of each (a WORKDIR's
    table format does not change: another one is refused)."""
    names = [u.split("=", 1)[0] for u in used]
    resets = [RESETS[n] for n in names if n in RESETS]
    fixed = "TABLE_FORMAT" in names
    parts = []
    if resets:
        back = "goes back to the default" if len(resets) == 1 else "go back to the defaults"
        parts.append(f"give another to change {'it' if len(resets) == 1 else 'them'}; {', '.join(resets)} {back}")
    if fixed:
        parts.append("a WORKDIR keeps its TABLE_FORMAT: another format needs a WORKDIR of its own")
    return "; ".join(parts)


def _a(table_format: str) -> str:
    return f"{'an' if table_format == 'iceberg' else 'a'} {table_format}"


def _check_tables(settings: JobSettings, layout: LocalLayout) -> None:
    """The routing, schema and partitioning valid, and each declared type one its table's column can take."""
    routes = load_routes(settings)
    catalog_db = layout.output / "_catalog" / "catalog.db"
    if settings.table_format != "iceberg" or not catalog_db.exists():
        return
    from glue_processor.table.catalog import check_declared, open_catalog
    from glue_processor.table.schema import typed_columns

    catalog = open_catalog(settings.catalog_uri)
    for config in routes.tables.values():
        check_declared(catalog, settings.database, config.name, typed_columns(config.declared, config.partitions))


def _format_on_disk(layout: LocalLayout) -> str | None:
    """The format of the table a WORKDIR from before ``table.json`` kept it holds, if any."""
    if layout.output.is_dir() and (any(layout.output.glob("dt=*")) or any(layout.output.glob("*/dt=*"))):
        return "hive-parquet"  # (its load history is an Iceberg table of the embedded catalog all the same)
    if (layout.output / "_catalog" / "catalog.db").exists():
        return "iceberg"
    return None


def _expect_file(path: Path) -> Path:
    if not path.is_file():
        raise ConfigError(f'EXPECT={path} is not a file: give a JSON file like {{"positive_amount": "amount > 0"}}')
    return path


def _schema_file(path: Path) -> Path:
    if not path.is_file():
        raise ConfigError(f'SCHEMA={path} is not a file: give a JSON file like {{"columns": {{"ts": "timestamp"}}}}')
    return path


class Progress:
    """One line per batch as the job runs: files and MB done of what was waiting, rows, time; and
    how each table's share settled (a share the table refused is not in it)."""

    def __init__(self, files: int, data_bytes: int, started: float) -> None:
        self.files, self.data_bytes, self.started = files, data_bytes, started
        self.done_files = self.done_bytes = self.rows = self.batches = 0
        self.unpublished: dict[tuple[int, str], tuple[str, str]] = {}
        self.manifests: set[str] = set()  # names of the manifests this run's batches committed

    def __call__(self, record: CommitRecord, settlements: Sequence[Settlement] = (), *, whose: str = "") -> None:
        s = record.stats
        self.batches += 1
        self.done_files += s.files
        self.done_bytes += s.input_bytes
        self.rows += s.records_out
        self.manifests.update(uri.rsplit("/", 1)[-1] for uri in record.manifests)
        for settled in settlements:
            if settled.settled != "published":
                self.unpublished[(record.batch_id, settled.table)] = (settled.settled, settled.reason or "")
        total_files = max(self.files, self.done_files)
        total = max(self.data_bytes, self.done_bytes)
        print(
            f"batch {record.batch_id}{whose}: {self.done_files:,} of {counted(total_files, 'file')}, "
            f"{size(self.done_bytes)} of {size(total)}, {counted(self.rows, 'row')}, "
            f"{time.monotonic() - self.started:.1f} s",
            flush=True,
        )

    def replayed(self, record: CommitRecord, settlements: Sequence[Settlement] = ()) -> None:
        """A batch the run that ended committed, whose publication this run finished."""
        self(record, settlements, whose=" (the last run's, committed before it ended; published now)")


def table_states(settings: JobSettings, layout: LocalLayout) -> list[TableState]:
    """Each table as a reader finds it now: rows, files and bytes from its current snapshot, and
    the (source, line) pairs found twice (DuckDB over its files: two columns read)."""
    from glue_processor.table.read import published_files

    out = []
    for name in load_routes(settings).tables:
        files = published_files(layout.output, database=settings.database, table_name=name)
        out.append(
            TableState(
                name=f"{settings.database}.{name}",
                rows=_rows(files),
                files=len(files),
                bytes=sum(f.stat().st_size for f in files),
                **_duplicates(files),
            )
        )
    return out


def _rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def _duplicates(files: list[Path]) -> dict[str, int]:
    """(source version, line) pairs found twice, and the rows of earlier versions of a changed
    source that the table still holds (kept beside the latest version's)."""
    if not files:
        return {"duplicates": 0, "earlier_rows": 0}
    import duckdb

    listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    con = duckdb.connect()
    # paths quoted: no user text is interpolated
    sql = (
        "SELECT count(*), count(DISTINCT (_source_uri, _source_etag, _line)), count(DISTINCT (_source_uri, _line)) "  # noqa: S608
        f"FROM read_parquet([{listed}], union_by_name = true)"
    )
    ((rows, versions, lines),) = con.execute(sql).fetchall()
    return {"duplicates": int(rows - versions), "earlier_rows": int(versions - lines)}


def _feed_line(feed: FeedResult, source: DataSource, here: Path) -> str:
    where = shown(source.path, here)
    ignored = f"; {len(feed.ignored):,} ignored (not .json/.ndjson/.jsonl/.gz)" if feed.ignored else ""
    replayed = " (and the interrupted feed of the last run)" if feed.replayed else ""
    what = counted(feed.files - feed.changed - feed.removed, "new file")
    if feed.changed:
        what += f", {counted(feed.changed, 'changed file')}"
    if feed.removed:
        what += f", {counted(feed.removed, 'deletion')}"
    return f"fed {what} ({size(feed.bytes)}) from {where}{ignored}{replayed}"


@cli
def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("manifest-builder"):  # what it ignores, the summary names
            logging.getLogger(name).setLevel(logging.ERROR)
    args = parse_args(argv)
    started = time.monotonic()
    here = Path.cwd()
    layout = LocalLayout(args.workdir.resolve())
    fresh = not layout.state.exists()
    made = not layout.workdir.exists()
    check_data(args.data)  # a DATA typo leaves no WORKDIR behind
    try:
        layout.create()
    except FileExistsError as exc:
        raise ConfigError(str(exc)) from exc
    except OSError as exc:  # a file where the folder should be, a path that cannot be written
        raise ConfigError(
            f"WORKDIR={args.workdir} cannot be used: {exc.strerror or exc}; give a folder you can write"
        ) from exc
    try:
        if signal.getsignal(signal.SIGINT) is _keep:  # from here a Ctrl-C is a KeyboardInterrupt
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if _PRESSED:
            raise KeyboardInterrupt
        with runs.exclusive(layout):
            return _main(args, layout, started=started, here=here, fresh=fresh)
    except ConfigError:
        if made:  # a mistake in a setting (SCHEMA=, ROUTES=, ...) leaves no WORKDIR behind either
            _unmake(layout)
        raise
    except KeyboardInterrupt:
        # Ctrl-C before the job ran (Spark starting, the feed hashing): a batch is never cut by it
        # (the job stops between batches), and a feed cut short is replayed by the next run
        print("stopped (Ctrl-C) before the job ran: nothing was loaded; make run starts again", file=sys.stderr)
        return INTERRUPTED


def _unmake(layout: LocalLayout) -> None:
    """Remove a WORKDIR this run made, unless a file was fed into it (then it holds a manifest the
    next run must load): what a refused setting left is folders, a link and this run's state."""
    if layout.manifests.is_dir() and any(layout.manifests.iterdir()):
        return
    if layout.output.exists() or layout.checkpoint.exists():
        return
    shutil.rmtree(layout.workdir, ignore_errors=True)


def _main(args: argparse.Namespace, layout: LocalLayout, *, started: float, here: Path, fresh: bool) -> int:
    source = choose(layout, args.data)
    if source.sample and not source.path.exists():
        # said whole: a new WORKDIR without DATA may be a typo of one that holds the user's table
        new = f"WORKDIR={args.workdir} is new and DATA= is not given: " if fresh else ""
        print(
            f"{new}generating a sample of {args.sample_files} NDJSON files in {shown(source.path, here)} "
            "(your own files: make run DATA=<folder> WORKDIR=<new dir>)"
        )
        generate(source.path, files=args.sample_files, records_per_file=args.sample_records)
    try:
        layout.link_landing(source.path)
    except OSError as exc:
        raise ConfigError(f"WORKDIR={args.workdir}: {exc}") from exc
    remember(layout, source)
    table_settings = _table_settings(args, layout)
    builder = load_settings(
        manifest_bucket=MANIFEST_BUCKET, manifest_prefix=MANIFEST_PREFIX, max_manifest_files=args.max_manifest_files
    )
    routes = routes_file(layout, args.routes)
    try:
        settings = job_settings(layout, args, routes)
        # a bad routing file, schema or partitioning stops here, before anything is fed; and so does a
        # declared type the table's column cannot take (the job would refuse it at start-up)
        _check_tables(settings, layout)
    except ConfigError as exc:
        # files named as the user gave them, not as URIs or the copy WORKDIR keeps
        text = str(exc)
        if routes is not None and args.routes is not None:
            text = text.replace(local_uri(routes), str(args.routes))
        if args.expect is not None:
            text = text.replace(local_uri(args.expect), str(args.expect))
        if args.schema is not None:
            text = text.replace(local_uri(args.schema), str(args.schema))
            if "declared types do not fit" in text:
                text += "; SCHEMA=default goes back to string columns"
        raise ConfigError(text) from exc
    layout.table_settings.write_text(json.dumps(table_settings), encoding="utf-8")  # valid: kept
    settings_print = runs.fingerprint(
        settings.model_dump_json(),
        routes.read_bytes() if routes else b"",
        args.schema.read_bytes() if args.schema else b"",
        args.expect.read_bytes() if args.expect else b"",
    )
    feeder = Feeder(layout, builder, sqs_batch_size=args.sqs_batch_size, metrics=JsonlSink(layout.metrics))
    if not feeder.pending():
        last = runs.nothing_to_do(layout, fed=0, replayed=False, settings_print=settings_print)
        if last is not None:
            print(
                f"nothing new in {shown(source.path, here)} since the last run ({last[:19].replace('T', ' ')}): "
                f"the tables are as they were; make query WORKDIR={args.workdir}"
            )
            return 0
    # the JVM starts while the feed hashes the new files (both take seconds; neither needs the other)
    with ThreadPoolExecutor(max_workers=1) as pool:
        fed = pool.submit(feeder.feed)
        try:
            return _run_job(
                args,
                layout,
                settings,
                fed=fed,
                source=source,
                settings_print=settings_print,
                started=started,
                here=here,
            )
        finally:
            fed.cancel()


def _run_job(
    args: argparse.Namespace,
    layout: LocalLayout,
    settings: JobSettings,
    *,
    fed: Future[FeedResult],
    source: DataSource,
    settings_print: str,
    started: float,
    here: Path,
) -> int:
    from glue_processor.main import run_query

    # a Ctrl-C is taken between batches, and before the job runs it stops it from starting
    early = threading.Event()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: early.set())
    spark = start_spark(args.cores)
    try:
        feed = fed.result()
        print(_feed_line(feed, source, here))
        waiting = runs.waiting(layout)
        # a manifest the last run drained stays listed (the file source keeps its own log): not waiting
        drained_before = set(runs.read(layout).get("drained", []))
        left = [m for m in waiting.manifests if m not in drained_before]
        left_bytes = sum(manifest_data_bytes(m) or 0 for m in left)
        files = _files_waiting(layout, left)
        have = os.cpu_count() or 1
        more = (
            f", more than this machine's {have}: its tasks take turns"
            if args.cores.isdigit() and int(args.cores) > have
            else ""
        )
        print(
            f"running the streaming job on local Spark ({args.cores if args.cores != '*' else 'all'} cores{more}): "
            f"{counted(len(left), 'manifest')}, {counted(files, 'file')}, {size(left_bytes)}",
            flush=True,
        )
        if early.is_set():
            print("stopped (Ctrl-C) before the job ran: nothing was loaded; make run starts again", file=sys.stderr)
            return INTERRUPTED
        cut = runs.unfinished(layout)
        if cut is not None:
            when = f" (started {cut[:19].replace('T', ' ')})" if cut else ""
            print(
                f"the last run{when} ended without finishing (killed or crashed): resuming from its checkpoint; "
                "what it committed is not loaded again",
                flush=True,
            )
        began = datetime.now().astimezone() - timedelta(seconds=time.monotonic() - started)
        runs.mark_run(layout, finished=False, began=began)
        progress = Progress(files, left_bytes, started)
        run = run_query(
            spark,
            settings,
            on_batch=progress,
            on_replay=progress.replayed,
            early_stop=early,
            records_kept=RECORDS_KEPT,
        )
        # available-now drained every manifest listed before it started, unless a signal stopped it
        # between batches or another run fenced it out: then the next run must look again (unless
        # this run's batches took every manifest that was waiting)
        stopped = run.last is None or run.fenced or run.interrupted
        drained = not stopped or set(left) <= progress.manifests
        runs.mark_run(layout, finished=True, drained=waiting.manifests if drained else (), fingerprint=settings_print)
        committed = list(run.committed)
        interrupted = early.is_set() or run.interrupted  # Ctrl-C, not a fence
        if not drained and not committed and interrupted:
            print(
                f"stopped before the first batch: nothing was loaded; make run WORKDIR={args.workdir} loads the "
                f"{counted(files, 'waiting file')}",
                file=sys.stderr,
            )
            return INTERRUPTED
        if not drained:
            print("stopped before every waiting manifest was loaded: make run loads the rest", flush=True)
        if progress.batches > len(committed):
            print(f"the summary below is of this run's latest {len(committed):,} batches of {progress.batches:,}")
        last = run.last
        known = {name: tuple(sorted(last.memory.keys_of(name))) for name in last.routes.tables} if last else {}
        tables = load_routes(settings).tables
        report = RunReport(
            records=committed,
            fed_files=feed.files,
            changed_files=feed.changed,
            removed_files=feed.removed,
            ignored=feed.ignored,
            tables=table_states(settings, layout),
            quarantined=quarantine_records(committed),
            workdir=layout.workdir,
            data=source.path,
            seconds=time.monotonic() - started,
            known_keys=known,
            shown_keys=_shown_keys(layout, known),
            unpublished=progress.unpublished,
            rule_modes={
                (table, rule.name): rule.on_fail
                for table, config in tables.items()
                if config.rules is not None
                for rule in config.rules.specs
            },
            misnamed={
                table: misnamed(config.rules, known.get(table, ()))
                for table, config in tables.items()
                if config.rules is not None
            },
        )
        print(render(report, here=here), flush=True)
    finally:
        spark.stop()
    error = unpublished_error(report.not_published(), progress, kept=len(report.records), workdir=args.workdir)
    if error:
        print(error, file=sys.stderr)
        return NOT_PUBLISHED
    return 0


def start_spark(cores: str) -> SparkSession:
    """Local Spark for ``make run``, started off the main thread. PySpark's start installs, from the
    main thread only, a SIGINT handler that cancels every job and raises in whatever py4j call runs:
    a Ctrl-C in the rest of the start (the session's own calls) then broke the gateway mid-call, with
    a traceback and a Py4JError (a CI run, Ctrl-C 4 s in). From a worker thread none is installed and
    the run's own handler, set before, takes the Ctrl-C; the main thread only waits."""
    from glue_processor.local.session import local_session

    with ThreadPoolExecutor(1, thread_name_prefix="spark-start") as pool:
        spark = pool.submit(local_session, cores=cores, quiet=True).result()
    # the JVM's active session is per thread (PySpark pins a JVM thread to each Python one): this
    # thread's is set as the start set the worker's
    jvm = spark._jvm
    assert jvm is not None  # a session started here has its gateway
    jvm.SparkSession.setActiveSession(spark._jsparkSession)
    return spark


def unpublished_error(refused: int, progress: Progress, *, kept: int, workdir: Path) -> str | None:
    """Why the run fails, when a table refused rows it loaded: ``refused`` files of the summary's
    records, or, past the records kept (``kept`` of ``progress.batches``), a share the progress line
    was told of."""
    fix = f"Fix the cause, then make reconcile WORKDIR={workdir} REQUEUE=1 and make run WORKDIR={workdir}"
    if refused:
        return (
            f"error: {counted(refused, 'file')} loaded but not published: the table refused their rows (above). {fix}"
        )
    earlier = sum(1 for settled, _ in progress.unpublished.values() if settled == "abandoned")
    if earlier and progress.batches > kept:
        return (
            f"error: {counted(earlier, 'table share')} of batches before the summary's: loaded but not published, "
            f"the table refused their rows. {fix}"
        )
    return None


def _shown_keys(layout: LocalLayout, known: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """The keys each table had when an earlier run's summary last spoke of its columns (a renamed
    column is said once, in the run that brings it, not in every run after)."""
    kept = layout.state / "columns.json"
    try:
        before = {k: tuple(v) for k, v in json.loads(kept.read_text(encoding="utf-8")).items()}
    except (OSError, ValueError, AttributeError):
        before = {}
    if known:
        kept.write_text(json.dumps(known), encoding="utf-8")
    return before


def _files_waiting(layout: LocalLayout, names: list[str]) -> int:
    """The objects the waiting manifests list (each names its file count)."""
    total = 0
    for name in names:
        try:
            total += int(json.loads((layout.manifests / name).read_bytes()).get("file_count", 0))
        except (OSError, ValueError):
            continue
    return total


if __name__ == "__main__":
    sys.exit(main())
