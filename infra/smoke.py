"""``make smoke``: an end-to-end check of a deployed stack, from the landing bucket to the table.

It uploads a few hundred small NDJSON objects (and one with a malformed line) under
``<landing prefix>smoke/<run id>/``, waits until the pipeline has put every good line in the
Iceberg table exactly once (read through the Glue Data Catalog with pyiceberg) and the bad line in
the quarantine, prints what it saw (rows missing, duplicates, end-to-end latency), and then removes
what it created: every version of its objects, its rows (one pyiceberg delete), and the quarantine
files that hold nothing but its own records. Exit status: 0 when everything arrived exactly once,
1 when not (the reasons are printed), 2 for a usage or configuration error.

Nothing here assumes a test double: clients come from :func:`clients`, which takes an
``endpoint_url`` (``AWS_ENDPOINT_URL`` when set), so the tests point it at moto's server.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import secrets
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pyarrow as pa
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.expressions import And, BooleanExpression, GreaterThanOrEqual, Reference, StartsWith
from pyiceberg.expressions.literals import literal
from pyiceberg.table import Table

from contracts.exceptions import ConfigError
from contracts.routing import read_routing
from infra import stack as cfn_stack
from infra.exceptions import DeployError, StackNotFound

UPLOAD_THREADS = 16
# stack output -> Resources field
OUTPUTS = {
    "LandingBucketName": "landing_bucket",
    "LandingPrefixOut": "landing_prefix",
    "Database": "database",
    "Table": "table",
    "QuarantineUri": "quarantine_uri",
}
RUN_ID_TIME = "%Y%m%dT%H%M%SZ"
# Scans and the delete also bound `_ingest_time` (the table is partitioned by its day), so they read
# the recent files only, not the whole table; the margin covers clock skew between here and the job.
INGEST_SKEW = timedelta(hours=1)
# Quarantine files older than the run (less this margin) cannot hold its records: not read.
QUARANTINE_SKEW = timedelta(minutes=15)
DELETE_ATTEMPTS = 5
LINEAGE = ("_source_uri", "_line", "_ingest_time")
SNAPSHOT_PROPERTY = "ingest.smoke-run"


@dataclass(frozen=True)
class Resources:
    landing_bucket: str
    landing_prefix: str
    database: str
    table: str
    quarantine_uri: str
    routes_uri: str = ""  # the stack's routing file (its RoutesUri output), if any

    @property
    def quarantine(self) -> tuple[str, str]:
        """(bucket, prefix) of the quarantine root; the prefix ends with '/' (or is empty)."""
        if not self.quarantine_uri.startswith("s3://"):
            raise DeployError(f"quarantine URI {self.quarantine_uri!r}: expected s3://bucket/prefix/")
        bucket, _, prefix = self.quarantine_uri[len("s3://") :].partition("/")
        if not bucket:
            raise DeployError(f"quarantine URI {self.quarantine_uri!r} names no bucket")
        return bucket, (prefix.rstrip("/") + "/" if prefix.strip("/") else "")


@dataclass(frozen=True)
class Clients:
    session: Any
    region: str
    endpoint_url: str | None
    cfn: Any
    s3: Any
    glue: Any

    def catalog(self) -> GlueCatalog:
        """A Glue catalog on this session's glue client; its table files are read with the same
        credentials (and endpoint), taken afresh on each call so a long wait outlives them."""
        props = {"client.region": self.region}
        creds = self.session.get_credentials()
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            props |= {"s3.access-key-id": frozen.access_key, "s3.secret-access-key": frozen.secret_key}
            if frozen.token:
                props["s3.session-token"] = frozen.token
        if self.endpoint_url:
            props["s3.endpoint"] = self.endpoint_url
        return GlueCatalog("smoke", client=self.glue, **props)


def clients(region: str | None, endpoint_url: str | None = None) -> Clients:
    """Every client of the run, from one session; ``endpoint_url`` defaults to ``AWS_ENDPOINT_URL``."""
    endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    try:
        s = boto3.Session(region_name=region)
        if not s.region_name:
            raise DeployError("no AWS region: pass REGION=... (make smoke REGION=eu-west-1) or set AWS_REGION")
        identity = s.client("sts", endpoint_url=endpoint_url).get_caller_identity()
    except (NoCredentialsError, NoRegionError) as exc:
        raise DeployError(f"no usable AWS credentials ({exc}); configure a profile or AWS_* variables") from exc
    except ClientError as exc:
        raise DeployError(f"AWS rejected the credentials: {exc}") from exc
    except BotoCoreError as exc:
        raise DeployError(f"cannot reach AWS: {exc}") from exc
    print(f"account {identity['Account']} as {identity['Arn']} in {s.region_name}")
    pool = Config(max_pool_connections=UPLOAD_THREADS * 2)
    return Clients(
        session=s,
        region=s.region_name,
        endpoint_url=endpoint_url,
        cfn=s.client("cloudformation", endpoint_url=endpoint_url),
        s3=s.client("s3", endpoint_url=endpoint_url, config=pool),
        glue=s.client("glue", endpoint_url=endpoint_url),
    )


def resources(cfn: Any, stack: str | None, given: dict[str, str | None]) -> Resources:
    """Explicit values win; the rest come from the stack's outputs."""
    values = {k: v for k, v in given.items() if v is not None}
    if len(values) < len(OUTPUTS):
        if not stack:
            raise DeployError("no --stack, and not every resource given explicitly")
        found = cfn_stack.describe(cfn, stack)
        if found is None:
            raise StackNotFound(f"stack {stack} does not exist in this account and region (make deploy first)")
        outputs = {o["OutputKey"]: o["OutputValue"] for o in found.get("Outputs", [])}
        for output, name in OUTPUTS.items():
            if name not in values and output in outputs:
                values[name] = outputs[output]
        missing = [o for o, name in OUTPUTS.items() if name not in values]
        if missing:
            raise DeployError(f"stack {stack} has no output {', '.join(missing)} (is it deployed from this template?)")
        if given.get("table") is None and outputs.get("RoutesUri"):
            values["routes_uri"] = outputs["RoutesUri"]
    return Resources(**values)


def routed(res: Resources, s3: Any) -> Resources:
    """With a routing file, the table the smoke's objects go to (the file names it by their key)."""
    if not res.routes_uri:
        return res
    try:
        routing = read_routing(s3, res.routes_uri)
    except ConfigError as exc:
        raise DeployError(f"reading the stack's routing file: {exc}") from exc
    sample = f"{res.landing_prefix}smoke/{new_run_id(datetime.now(UTC))}/part-00000.json"
    table = routing.table_of(sample)
    if table is None:
        raise DeployError(
            f"the routing file {res.routes_uri} takes no key like {sample}: the smoke's objects would be ignored; "
            "add a route for them, or run with --landing-prefix under a routed prefix, or --table"
        )
    return replace(res, table=table)


def new_run_id(now: datetime) -> str:
    return f"{now.strftime(RUN_ID_TIME)}-{secrets.token_hex(4)}"


def run_started(run_id: str) -> datetime:
    try:
        return datetime.strptime(run_id.split("-", 1)[0], RUN_ID_TIME).replace(tzinfo=UTC)
    except ValueError as exc:
        raise DeployError(f"run id {run_id!r}: expected <{RUN_ID_TIME}>-<hex>, as a run prints it") from exc


@dataclass(frozen=True)
class Run:
    """One run's names: what it uploads under, and the filter that finds its rows."""

    res: Resources
    run_id: str

    @property
    def prefix(self) -> str:
        return f"{self.res.landing_prefix}smoke/{self.run_id}/"

    @property
    def uri(self) -> str:
        return f"s3://{self.res.landing_bucket}/{self.prefix}"

    @property
    def since(self) -> datetime:
        return run_started(self.run_id)

    def rows(self) -> BooleanExpression:
        return And(
            GreaterThanOrEqual(term=Reference("_ingest_time"), value=literal((self.since - INGEST_SKEW).isoformat())),
            StartsWith(term=Reference("_source_uri"), value=literal(self.uri)),
        )


@dataclass(frozen=True)
class SmokeObject:
    key: str
    body: bytes
    good: tuple[int, ...]
    bad: tuple[int, ...] = ()


def generate(r: Run, files: int) -> list[SmokeObject]:
    """``files`` objects of 1-20 lines, and one more whose second of three lines is malformed."""
    rng = random.Random(r.run_id)  # noqa: S311 (test data, reproducible from the run id)

    def row(n: int, line: int) -> str:
        payload = {"part": n, "line": line, "tags": ["smoke", r.run_id[-8:]], "score": rng.randint(0, 999) / 10}
        return json.dumps({"id": f"{r.run_id}-{n}-{line}", "run": r.run_id, "payload": payload})

    out = []
    for n in range(1, files + 1):
        lines = [row(n, i) for i in range(1, rng.randint(1, 20) + 1)]
        out.append(
            SmokeObject(
                f"{r.prefix}part-{n:05d}.json", ("\n".join(lines) + "\n").encode(), tuple(range(1, len(lines) + 1))
            )
        )
    broken = f'{{"id": "{r.run_id}-malformed-2", "run": "{r.run_id}", "payload": {{"part": '
    body = "\n".join([row(0, 1), broken, row(0, 3)]) + "\n"
    out.append(SmokeObject(f"{r.prefix}malformed.json", body.encode(), (1, 3), (2,)))
    return out


def upload(s3: Any, bucket: str, objects: list[SmokeObject]) -> dict[str, datetime]:
    """Put the objects, 16 at a time; when each was stored, by source URI."""

    def put(o: SmokeObject) -> tuple[str, datetime]:
        s3.put_object(Bucket=bucket, Key=o.key, Body=o.body, ContentType="application/x-ndjson")
        return f"s3://{bucket}/{o.key}", datetime.now(UTC)

    try:
        with ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool:
            return dict(pool.map(put, objects))
    except (ClientError, BotoCoreError) as exc:
        raise DeployError(f"upload to s3://{bucket}/ failed: {exc}") from exc


def load_table(c: Clients, res: Resources) -> Table:
    try:
        return c.catalog().load_table((res.database, res.table))
    except NoSuchTableError as exc:
        raise DeployError(f"table {res.database}.{res.table} is not in the Glue Data Catalog: {exc}") from exc
    except (ClientError, BotoCoreError) as exc:
        raise DeployError(f"cannot load table {res.database}.{res.table}: {exc}") from exc


@dataclass
class Seen:
    """This run's rows in the table: how often each (source, line) pair, and when each object's
    last row was ingested."""

    pairs: Counter[tuple[str, int]] = field(default_factory=Counter)
    ingested: dict[str, datetime] = field(default_factory=dict)

    @classmethod
    def scan(cls, table: Table, r: Run) -> Seen:
        """From the current snapshot: the verdict."""
        return cls().add(table.scan(row_filter=r.rows(), selected_fields=LINEAGE).to_arrow())

    def add(self, rows: pa.Table) -> Seen:
        for uri, line, at in zip(*(rows.column(c).to_pylist() for c in LINEAGE), strict=True):
            self.pairs[(uri, int(line))] += 1
            if at is not None and (uri not in self.ingested or at > self.ingested[uri]):
                self.ingested[uri] = at
        return self


class Watch:
    """The run's rows while waiting, cheaply: each poll reloads the table and reads only the data
    files appended since the previous one (an incremental append scan); :meth:`full` reads the
    current snapshot, for the verdict (it also sees rewrites and deletes, which appends do not)."""

    def __init__(self, c: Clients, r: Run) -> None:
        self.c, self.run, self.seen = c, r, Seen()
        snapshot = load_table(c, r.res).current_snapshot()
        self.last = snapshot.snapshot_id if snapshot is not None else None

    def poll(self) -> Seen:
        table = load_table(self.c, self.run.res)
        snapshot = table.current_snapshot()
        if snapshot is None or snapshot.snapshot_id == self.last:
            return self.seen
        try:
            scan = table.incremental_append_scan(
                from_snapshot_id_exclusive=self.last,
                to_snapshot_id_inclusive=snapshot.snapshot_id,
                row_filter=self.run.rows(),
                selected_fields=LINEAGE,
            )
            self.seen.add(scan.to_arrow())
        except ValueError:  # the previous snapshot is no ancestor any more (rolled back, expired)
            self.seen = Seen.scan(table, self.run)
        self.last = snapshot.snapshot_id
        return self.seen

    def full(self) -> Seen:
        return Seen.scan(load_table(self.c, self.run.res), self.run)


@dataclass
class QuarantineFile:
    key: str
    records: list[dict[str, Any]]  # this run's
    others: int  # records of anything else (and lines that are not records)


class Quarantine:
    """The quarantine files written since the run started, each read once (cached by ETag)."""

    def __init__(self, s3: Any, res: Resources, r: Run) -> None:
        self.s3, self.run = s3, r
        self.bucket, self.prefix = res.quarantine
        self.files: dict[tuple[str, str], QuarantineFile] = {}

    def read(self) -> list[QuarantineFile]:
        since = self.run.since - QUARANTINE_SKEW
        found = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
            for o in page.get("Contents", []):
                key = o["Key"]
                hidden = any(part.startswith(("_", ".")) for part in key[len(self.prefix) :].split("/"))
                if hidden or o["LastModified"] < since or not key.endswith((".json", ".jsonl", ".json.gz")):
                    continue
                cached = (key, o["ETag"])
                if cached not in self.files:
                    self.files[cached] = self._parse(key)
                found.append(self.files[cached])
        return [f for f in found if f.records]

    def _parse(self, key: str) -> QuarantineFile:
        body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        text = (gzip.decompress(body) if key.endswith(".gz") else body).decode("utf-8", errors="replace")
        mine, others = [], 0
        for line in filter(str.strip, text.splitlines()):
            try:
                record = json.loads(line)
            except ValueError:
                others += 1
                continue
            if isinstance(record, dict) and str(record.get("source_uri", "")).startswith(self.run.uri):
                mine.append(record)
            else:
                others += 1
        return QuarantineFile(key, mine, others)


def assess(
    objects: list[SmokeObject],
    bucket: str,
    uploaded: dict[str, datetime],
    seen: Seen,
    quarantined: list[dict[str, Any]],
) -> dict[str, Any]:
    expected = {(f"s3://{bucket}/{o.key}", n) for o in objects for n in o.good}
    bad = {(f"s3://{bucket}/{o.key}", n) for o in objects for n in o.bad}
    got = {(str(q.get("source_uri")), int(q.get("line") or 0)) for q in quarantined if q.get("kind") == "line"}
    latencies = [(at - uploaded[uri]).total_seconds() for uri, at in seen.ingested.items() if uri in uploaded]
    report: dict[str, Any] = {
        "objects_uploaded": len(objects),
        "lines_written": sum(len(o.good) + len(o.bad) for o in objects),
        "rows_expected": len(expected),
        "rows_seen": sum(seen.pairs.values()),
        "rows_missing": len(expected - set(seen.pairs)),
        "rows_unexpected": len(set(seen.pairs) - expected),
        "duplicates": sum(1 for n in seen.pairs.values() if n > 1),
        "objects_seen": len(seen.ingested),
        "latency_p50_s": round(statistics.median(latencies), 1) if latencies else None,
        "latency_max_s": round(max(latencies), 1) if latencies else None,
        "bad_lines": len(bad),
        "bad_lines_quarantined": len(bad & got),
        "quarantine": quarantined,
    }
    reasons = []
    if report["rows_missing"]:
        reasons.append(f"{report['rows_missing']} of {len(expected)} expected rows are not in the table")
    if report["duplicates"]:
        reasons.append(f"{report['duplicates']} (_source_uri, _line) pairs are in the table more than once")
    if report["rows_unexpected"]:
        reasons.append(f"{report['rows_unexpected']} rows in the table are not lines the run wrote as good ones")
    if bad - got:
        reasons.append(f"{len(bad - got)} malformed line(s) not in the quarantine")
    if extra := [q for q in quarantined if (str(q.get("source_uri")), int(q.get("line") or 0)) not in bad]:
        reasons.append(f"{len(extra)} quarantine records for good input: {extra[:3]}")
    report |= {"ok": not reasons, "reasons": reasons}
    return report


def wait(
    watch: Watch,
    objects: list[SmokeObject],
    uploaded: dict[str, datetime],
    quarantine: Quarantine,
    *,
    timeout: float,
    poll: float,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll the table (reloaded each time), then the quarantine, until everything is there or time is up."""
    bucket, start = watch.run.res.landing_bucket, time.monotonic()
    while True:
        report = assess(objects, bucket, uploaded, watch.poll(), [])
        late = time.monotonic() - start >= timeout
        if report["rows_missing"] == 0 or late:
            # the whole (recent) table and the quarantine are read once the rows are in, or at the end
            records = [q for f in quarantine.read() for q in f.records]
            report = assess(objects, bucket, uploaded, watch.full(), records)
        elapsed = time.monotonic() - start
        print(
            f"  {elapsed:6.0f} s: {report['rows_seen']} of {report['rows_expected']} rows, "
            f"{report['bad_lines_quarantined']} of {report['bad_lines']} bad line(s) quarantined"
        )
        settled = report["rows_missing"] == 0 and report["bad_lines_quarantined"] == report["bad_lines"]
        if settled or late:  # duplicates and strays do not go away by waiting
            return report | {"waited_s": round(elapsed, 1)}
        sleep(max(0.0, min(poll, timeout - elapsed)))


def clean_up(
    c: Clients, r: Run, quarantine: Quarantine, *, sleep: Callable[[float], None] = time.sleep
) -> dict[str, Any]:
    """Remove what the run created, each step on its own: a failed step is reported, not fatal."""
    out: dict[str, Any] = {"errors": []}
    steps: list[tuple[str, Callable[[], int]]] = [
        ("landing_versions_deleted", lambda: delete_landing(c.s3, r.res.landing_bucket, r.prefix)),
        ("table_rows_deleted", lambda: delete_rows(c, r, sleep=sleep)),
        ("quarantine_files_deleted", lambda: delete_quarantine(c.s3, quarantine)),
    ]
    for name, step in steps:
        try:
            out[name] = step()
        except (ClientError, BotoCoreError, DeployError, CommitFailedException) as exc:
            out["errors"].append(f"{name.split('_deleted')[0]}: {exc}")
    return out


def delete_landing(s3: Any, bucket: str, prefix: str) -> int:
    """Every version and delete marker under the run's prefix (the landing bucket is versioned)."""
    doomed = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        doomed += [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in page.get("Versions", [])]
        doomed += [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in page.get("DeleteMarkers", [])]
    for i in range(0, len(doomed), 1000):
        errors = s3.delete_objects(Bucket=bucket, Delete={"Objects": doomed[i : i + 1000], "Quiet": True}).get("Errors")
        if errors:
            raise DeployError(f"{len(errors)} versions under s3://{bucket}/{prefix} not deleted: {errors[:3]}")
    return len(doomed)


def delete_rows(c: Clients, r: Run, *, sleep: Callable[[float], None] = time.sleep) -> int:
    """The run's rows, with one pyiceberg delete; retried when the job commits in between."""
    for attempt in range(1, DELETE_ATTEMPTS + 1):
        table = load_table(c, r.res)
        rows = sum(Seen.scan(table, r).pairs.values())
        if rows == 0:
            return 0
        try:
            table.delete(delete_filter=r.rows(), snapshot_properties={SNAPSHOT_PROPERTY: r.run_id})
            return rows
        except CommitFailedException:
            if attempt == DELETE_ATTEMPTS:
                raise
            sleep(2.0**attempt)
    raise AssertionError("unreachable")


def delete_quarantine(s3: Any, quarantine: Quarantine) -> int:
    """Every version of the quarantine files that hold nothing but this run's records."""
    deleted = 0
    for f in quarantine.read():
        if f.others:
            print(f"  kept s3://{quarantine.bucket}/{f.key}: it holds other records too")
            continue
        pages = s3.get_paginator("list_object_versions").paginate(Bucket=quarantine.bucket, Prefix=f.key)
        versions = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for page in pages
            for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
            if v["Key"] == f.key
        ]
        if versions:
            out = s3.delete_objects(Bucket=quarantine.bucket, Delete={"Objects": versions, "Quiet": True})
            if out.get("Errors"):
                raise DeployError(f"s3://{quarantine.bucket}/{f.key} not deleted: {out['Errors'][:3]}")
        deleted += 1
    return deleted


def run(
    res: Resources,
    *,
    c: Clients | None = None,
    region: str | None = None,
    files: int = 300,
    timeout: float = 900,
    poll: float = 10,
    keep: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Upload, wait, report, clean up; the report as a dict (``ok`` says whether the check passed)."""
    if files < 1 or timeout < 0 or poll <= 0:
        raise DeployError("--files must be at least 1, --timeout at least 0, --poll more than 0")
    c = c or clients(region)
    r = Run(res, new_run_id(datetime.now(UTC)))
    watch = Watch(c, r)  # loads the table before anything is uploaded: a wrong one is a configuration error
    objects = generate(r, files)
    quarantine = Quarantine(c.s3, res, r)
    print(f"run {r.run_id}: uploading {len(objects)} objects to {r.uri}")
    report: dict[str, Any] = {"run_id": r.run_id, "prefix": r.uri}
    try:
        uploaded = upload(c.s3, res.landing_bucket, objects)
        print(f"waiting up to {timeout:.0f} s for the rows in {res.database}.{res.table}")
        report |= wait(watch, objects, uploaded, quarantine, timeout=timeout, poll=poll, sleep=sleep)
    finally:
        if keep:
            print(f"kept (--keep): the objects under {r.uri}, the run's rows and quarantine records")
        else:
            cleaned = clean_up(c, r, quarantine, sleep=sleep)
            report["cleanup"] = cleaned
            if cleaned["errors"] and "ok" in report:
                report["ok"] = False
                report["reasons"] = [*report["reasons"], *(f"clean-up: {e}" for e in cleaned["errors"])]
    return report


def print_report(report: dict[str, Any]) -> None:
    for key in (
        "run_id",
        "objects_uploaded",
        "lines_written",
        "rows_expected",
        "rows_seen",
        "rows_missing",
        "rows_unexpected",
        "duplicates",
        "latency_p50_s",
        "latency_max_s",
        "bad_lines_quarantined",
        "waited_s",
    ):
        print(f"{key:24} {report.get(key)}")
    for q in report.get("quarantine", []):
        print(f"{'quarantined':24} {q.get('source_uri')} line {q.get('line')}: {q.get('reason')}")
    cleanup = report.get("cleanup")
    if cleanup is not None:
        done = ", ".join(f"{k} {v}" for k, v in cleanup.items() if k != "errors")
        print(f"{'cleanup':24} {done}")
    if report["ok"]:
        print("smoke check passed: every line arrived exactly once, the malformed one in the quarantine")
    else:
        print("smoke check FAILED:\n" + "\n".join(f"  - {reason}" for reason in report["reasons"]))
        print(f"(rows or records that arrive later stay: make smoke ... CLEAN_UP={report['run_id']} removes them)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="smoke", description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--stack", default="ndjson-ingest", help="read the resources from this stack's outputs")
    p.add_argument("--region")
    p.add_argument("--landing-bucket", help="overrides the stack output LandingBucketName")
    p.add_argument("--landing-prefix", help="overrides LandingPrefixOut")
    p.add_argument("--database", help="overrides Database")
    p.add_argument("--table", help="overrides Table")
    p.add_argument("--quarantine-uri", help="overrides QuarantineUri (s3://bucket/prefix/)")
    p.add_argument("--files", type=int, default=300, help="objects to upload (plus one with a malformed line)")
    p.add_argument("--timeout", type=float, default=900, help="seconds to wait for the rows")
    p.add_argument("--poll", type=float, default=10, help="seconds between two looks at the table")
    p.add_argument("--keep", action="store_true", help="leave the objects, rows and quarantine records in place")
    p.add_argument("--clean-up", metavar="RUN_ID", help="only remove what an earlier run left (rows that came late)")
    args = p.parse_args(argv)
    given = {name: getattr(args, name) for name in OUTPUTS.values()}
    try:
        c = clients(args.region)
        res = routed(resources(c.cfn, args.stack, given), c.s3)
        if args.clean_up:
            r = Run(res, args.clean_up)
            run_started(args.clean_up)
            cleaned = clean_up(c, r, Quarantine(c.s3, res, r))
            print(f"cleaned up run {args.clean_up}: {cleaned}")
            return 1 if cleaned["errors"] else 0
        report = run(res, c=c, files=args.files, timeout=args.timeout, poll=args.poll, keep=args.keep)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError, OSError) as exc:  # e.g. access denied to the table's files
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print_report(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
