"""``make smoke`` (``infra.smoke``) end to end against moto's server, in-process.

moto serves S3, Glue, STS and CloudFormation over HTTP; the Iceberg table is created with
pyiceberg's GlueCatalog against it, and its files live in moto's S3 (pyarrow reads and writes them
through the ``s3.endpoint`` property). The deployed pipeline (S3 -> SQS -> Lambda -> Glue job) is
NOT here: a small thread, :class:`StandInJob`, plays its part (list, parse, append, quarantine).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pyarrow as pa
import pytest
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from infra import smoke

REGION = "us-east-1"
LANDING, OUTPUT, PREFIX = "landing", "output", "incoming/"
DATABASE, TABLE = "ingest", "events"
QUARANTINE = f"s3://{OUTPUT}/quarantine/"
SCHEMA = Schema(
    NestedField(1, "_source_uri", StringType(), required=False),
    NestedField(2, "_line", LongType(), required=False),
    NestedField(3, "_event_time", TimestamptzType(), required=False),
    NestedField(4, "_ingest_time", TimestamptzType(), required=False),
    NestedField(5, "id", StringType(), required=False),
    NestedField(6, "run", StringType(), required=False),
)
ARROW = pa.schema(
    [
        pa.field("_source_uri", pa.string()),
        pa.field("_line", pa.int64()),
        pa.field("_event_time", pa.timestamp("us", tz="UTC")),
        pa.field("_ingest_time", pa.timestamp("us", tz="UTC")),
        pa.field("id", pa.string()),
        pa.field("run", pa.string()),
    ]
)
FOREIGN_URI = f"s3://{LANDING}/{PREFIX}producer/a.json"
FOREIGN_QUARANTINE = "quarantine/day=1/foreign.json"


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    # port 0: the port the kernel gives the server's own socket (one picked, released and taken again
    # could go to another pytest process in between)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    url = f"http://127.0.0.1:{port}"
    for key, value in {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    try:
        yield url
    finally:
        boto3.client("s3", endpoint_url=url).close()
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=10)
        server.stop()


def _catalog(url: str) -> GlueCatalog:
    return GlueCatalog(
        "test",
        client=boto3.client("glue", endpoint_url=url, region_name=REGION),
        **{
            "client.region": REGION,
            "s3.endpoint": url,
            "s3.access-key-id": "testing",
            "s3.secret-access-key": "testing",
            "s3.region": REGION,
        },
    )


@pytest.fixture
def world(endpoint: str) -> Table:
    """The stack's resources in moto: a versioned landing bucket, the output bucket, the Glue
    database and the Iceberg table, with one row and one quarantine file of someone else."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    s3.create_bucket(Bucket=LANDING)
    s3.put_bucket_versioning(Bucket=LANDING, VersioningConfiguration={"Status": "Enabled"})
    s3.create_bucket(Bucket=OUTPUT)
    s3.put_bucket_versioning(Bucket=OUTPUT, VersioningConfiguration={"Status": "Enabled"})
    boto3.client("glue", endpoint_url=endpoint, region_name=REGION).create_database(DatabaseInput={"Name": DATABASE})
    table = _catalog(endpoint).create_table((DATABASE, TABLE), schema=SCHEMA, location=f"s3://{OUTPUT}/data/{TABLE}")
    now = datetime.now(UTC)
    table.append(pa.Table.from_pylist([_row(FOREIGN_URI, 1, now, {"id": "x", "run": "other"})], schema=ARROW))
    foreign = {"kind": "line", "source_uri": FOREIGN_URI, "line": 2, "reason": "not JSON", "raw": "{"}
    s3.put_object(Bucket=OUTPUT, Key=FOREIGN_QUARANTINE, Body=json.dumps(foreign).encode() + b"\n")
    return table


def _row(uri: str, line: int, now: datetime, doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "_source_uri": uri,
        "_line": line,
        "_event_time": now,
        "_ingest_time": now,
        "id": str(doc.get("id")),
        "run": str(doc.get("run")),
    }


class StandInJob(threading.Thread):
    """A STAND-IN for the deployed pipeline, not the pipeline: every 0.2 s it lists the landing
    prefix and, for each new object, appends its JSON-object lines to the table (one append per
    pass, ``_ingest_time`` = now) and writes the other lines as quarantine records. With
    ``duplicate``, it appends the rows of the first object it sees twice (a broken pipeline)."""

    def __init__(self, endpoint: str, *, duplicate: bool = False) -> None:
        super().__init__(daemon=True)
        self.duplicate = duplicate
        self.s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
        self.table = _catalog(endpoint).load_table((DATABASE, TABLE))
        self.done: set[str] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(0.2):
                self.step()
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def step(self) -> None:
        keys = [
            o["Key"]
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=LANDING, Prefix=PREFIX)
            for o in page.get("Contents", [])
            if o["Key"] not in self.done
        ]
        rows, bad, now = [], [], datetime.now(UTC)
        for key in keys:
            uri = f"s3://{LANDING}/{key}"
            text = self.s3.get_object(Bucket=LANDING, Key=key)["Body"].read().decode()
            for n, line in enumerate(text.splitlines(), start=1):
                try:
                    doc = json.loads(line)
                except ValueError:
                    doc = None
                if isinstance(doc, dict):
                    rows += [_row(uri, n, now, doc)] * (2 if self.duplicate and not self.done else 1)
                else:
                    bad.append(
                        {"kind": "line", "source_uri": uri, "line": n, "reason": "not a JSON object", "raw": line}
                    )
            self.done.add(key)
        if bad:
            body = "".join(json.dumps(b) + "\n" for b in bad).encode()
            self.s3.put_object(Bucket=OUTPUT, Key=f"quarantine/day=1/stand-in-{uuid.uuid4().hex}.json", Body=body)
        if rows:
            self.table.refresh()
            self.table.append(pa.Table.from_pylist(rows, schema=ARROW))


def _resources() -> smoke.Resources:
    return smoke.Resources(LANDING, PREFIX, DATABASE, TABLE, QUARANTINE)


def _explicit() -> list[str]:
    return [
        *("--landing-bucket", LANDING, "--landing-prefix", PREFIX, "--database", DATABASE),
        *("--table", TABLE, "--quarantine-uri", QUARANTINE),
    ]


def _left(endpoint: str, table: Table) -> tuple[list[str], list[str], list[str]]:
    """After a run: landing versions under the smoke prefix, the table's sources, quarantine keys."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    versions = s3.list_object_versions(Bucket=LANDING, Prefix=f"{PREFIX}smoke/")
    landing = [v["Key"] for v in versions.get("Versions", []) + versions.get("DeleteMarkers", [])]
    table.refresh()
    sources = sorted(set(table.scan(selected_fields=("_source_uri",)).to_arrow().column(0).to_pylist()))
    quarantine = [o["Key"] for o in s3.list_objects_v2(Bucket=OUTPUT, Prefix="quarantine/").get("Contents", [])]
    return landing, sources, quarantine


def test_smoke_run_against_a_stand_in_job(endpoint: str, world: Table) -> None:
    job = StandInJob(endpoint)
    job.start()
    try:
        report = smoke.run(_resources(), files=40, timeout=45, poll=0.3)
    finally:
        job.stop.set()
        job.join(10)
    assert job.error is None
    assert report["ok"], report["reasons"]
    assert report["objects_uploaded"] == 41
    assert report["rows_expected"] == report["rows_seen"] == report["lines_written"] - 1
    assert (report["rows_missing"], report["rows_unexpected"], report["duplicates"]) == (0, 0, 0)
    assert report["objects_seen"] == 41
    assert 0 <= report["latency_p50_s"] <= report["latency_max_s"] < 45
    [bad] = report["quarantine"]
    assert bad["source_uri"] == f"s3://{LANDING}/{PREFIX}smoke/{report['run_id']}/malformed.json"
    assert bad["line"] == 2
    assert report["cleanup"]["errors"] == []
    assert report["cleanup"]["landing_versions_deleted"] == 41
    assert report["cleanup"]["table_rows_deleted"] == report["rows_expected"]
    assert report["cleanup"]["quarantine_files_deleted"] == 1

    landing, sources, quarantine = _left(endpoint, world)
    assert landing == []
    assert sources == [FOREIGN_URI]  # the run's rows are gone, the other row is not
    assert quarantine == [FOREIGN_QUARANTINE]  # the run's file is gone, the other file is not
    snapshot = world.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary["ingest.smoke-run"] == report["run_id"]  # the delete is labelled


def test_duplicates_fail_the_check(endpoint: str, world: Table) -> None:
    job = StandInJob(endpoint, duplicate=True)
    job.start()
    try:
        report = smoke.run(_resources(), files=5, timeout=30, poll=0.3)
    finally:
        job.stop.set()
        job.join(10)
    assert job.error is None
    assert not report["ok"]
    assert report["duplicates"] > 0
    assert report["rows_seen"] == report["rows_expected"] + report["duplicates"]
    assert report["rows_missing"] == 0
    assert any("more than once" in reason for reason in report["reasons"])
    assert report["cleanup"]["table_rows_deleted"] == report["rows_seen"]
    _, sources, _ = _left(endpoint, world)
    assert sources == [FOREIGN_URI]


def test_smoke_fails_and_cleans_up_when_nothing_arrives(
    endpoint: str, world: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    status = smoke.main([*_explicit(), "--files", "5", "--timeout", "2", "--poll", "0.5"])
    out = capsys.readouterr().out
    assert status == 1
    assert "smoke check FAILED" in out
    assert "rows_missing" in out
    assert "expected rows are not in the table" in out
    assert "malformed line(s) not in the quarantine" in out
    landing, sources, quarantine = _left(endpoint, world)
    assert landing == []
    assert sources == [FOREIGN_URI]
    assert quarantine == [FOREIGN_QUARANTINE]


def test_usage_errors_exit_2(endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert smoke.main(["--stack", "no-such-stack"]) == 2
    assert "stack no-such-stack does not exist" in capsys.readouterr().err
    assert smoke.main([*_explicit(), "--table", "missing"]) == 2
    assert "is not in the Glue Data Catalog" in capsys.readouterr().err


OUTPUT_VALUES = {
    "LandingBucketName": LANDING,
    "LandingPrefixOut": PREFIX,
    "Database": DATABASE,
    "Table": TABLE,
    "QuarantineUri": QUARANTINE,
}


def test_resources_from_stack_outputs_explicit_ones_win(endpoint: str) -> None:
    cfn = boto3.client("cloudformation", endpoint_url=endpoint, region_name=REGION)
    outputs = dict(OUTPUT_VALUES)
    template: dict[str, Any] = {
        "Resources": {"Handle": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {k: {"Value": v} for k, v in outputs.items()},
    }
    cfn.create_stack(StackName="ingest", TemplateBody=json.dumps(template))
    given: dict[str, str | None] = dict.fromkeys(smoke.OUTPUTS.values())
    assert smoke.resources(cfn, "ingest", given) == _resources()
    assert smoke.resources(cfn, "ingest", given | {"table": "other"}).table == "other"
    del template["Outputs"]["Table"]
    cfn.create_stack(StackName="partial", TemplateBody=json.dumps(template))
    with pytest.raises(smoke.DeployError, match="has no output Table"):
        smoke.resources(cfn, "partial", given)
    assert smoke.resources(cfn, "partial", given | {"table": TABLE}) == _resources()


def test_with_a_routing_file_the_smoke_checks_the_table_its_objects_are_routed_to(endpoint: str) -> None:
    from contracts.routing import Route, Routing, TableSpec

    cfn = boto3.client("cloudformation", endpoint_url=endpoint, region_name=REGION)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    s3.create_bucket(Bucket="deploy-bucket")

    def stack(name: str, routing: Routing) -> smoke.Resources:
        s3.put_object(Bucket="deploy-bucket", Key=f"routes/{name}.json", Body=routing.to_json())
        outputs = {**OUTPUT_VALUES, "RoutesUri": f"s3://deploy-bucket/routes/{name}.json"}
        template = {
            "Resources": {"Handle": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {k: {"Value": v} for k, v in outputs.items()},
        }
        cfn.create_stack(StackName=name, TemplateBody=json.dumps(template))
        return smoke.resources(cfn, name, dict.fromkeys(smoke.OUTPUTS.values()))

    # Given a stack whose routing file sends the landing prefix's keys to another table than its own
    tables = {"clicks": TableSpec(), "catchall": TableSpec()}
    res = stack("routed", Routing(tables=tables, routes=[Route(prefix="x/", table="clicks")], unmatched="catchall"))
    # Then the smoke waits for its rows in the table its objects are routed to
    assert smoke.routed(res, s3).table == "catchall"
    # And a routing file that ignores the smoke's keys is a clear error before anything is uploaded
    res = stack("ignoring", Routing(tables={"clicks": TableSpec()}, routes=[Route(prefix="x/", table="clicks")]))
    with pytest.raises(smoke.DeployError, match="the smoke's objects would be ignored"):
        smoke.routed(res, s3)
    # And an explicit --table wins over the routing file
    given = dict.fromkeys(smoke.OUTPUTS.values()) | {"table": "mine"}
    assert smoke.routed(smoke.resources(cfn, "ignoring", given), s3).table == "mine"


def test_quarantine_files_with_other_records_are_kept(endpoint: str) -> None:
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    s3.create_bucket(Bucket=OUTPUT)
    r = smoke.Run(_resources(), smoke.new_run_id(datetime.now(UTC)))
    mine = {"kind": "line", "source_uri": f"{r.uri}malformed.json", "line": 2, "reason": "x", "raw": "{"}
    other = {"kind": "line", "source_uri": FOREIGN_URI, "line": 2, "reason": "x", "raw": "{"}
    files = {
        "quarantine/day=1/only-mine.json": [mine],
        "quarantine/day=1/mixed.json": [mine, other],
        "quarantine/day=1/other.json": [other],
        "quarantine/_staging/q/000000000001/a/mine.json": [mine],  # not published: not read
    }
    for key, records in files.items():
        s3.put_object(Bucket=OUTPUT, Key=key, Body="".join(json.dumps(x) + "\n" for x in records).encode())
    quarantine = smoke.Quarantine(s3, _resources(), r)
    assert sorted((f.key, len(f.records), f.others) for f in quarantine.read()) == [
        ("quarantine/day=1/mixed.json", 1, 1),
        ("quarantine/day=1/only-mine.json", 1, 0),
    ]
    assert smoke.delete_quarantine(s3, quarantine) == 1
    left = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=OUTPUT, Prefix="quarantine/")["Contents"])
    assert left == [
        "quarantine/_staging/q/000000000001/a/mine.json",
        "quarantine/day=1/mixed.json",
        "quarantine/day=1/other.json",
    ]


def test_keep_then_clean_up_by_run_id(endpoint: str, world: Table, capsys: pytest.CaptureFixture[str]) -> None:
    job = StandInJob(endpoint)
    job.start()
    try:
        report = smoke.run(_resources(), files=3, timeout=30, poll=0.3, keep=True)
    finally:
        job.stop.set()
        job.join(10)
    assert report["ok"], report["reasons"]
    assert "cleanup" not in report
    landing, sources, quarantine = _left(endpoint, world)
    assert len(landing) == 4
    assert len(sources) == 5  # the 4 objects and the other producer's
    assert len(quarantine) == 2
    assert smoke.main([*_explicit(), "--clean-up", report["run_id"]]) == 0
    assert f"cleaned up run {report['run_id']}" in capsys.readouterr().out
    assert _left(endpoint, world) == ([], [FOREIGN_URI], [FOREIGN_QUARANTINE])
