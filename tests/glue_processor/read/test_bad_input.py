"""Every kind of bad input has a defined outcome, and the rest of the batch is loaded."""

from __future__ import annotations

import gzip
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts.manifest import Manifest, ManifestEntry
from glue_processor.read import ndjson as T
from glue_processor.read.outcome import REASON_ALL_BAD
from tests.glue_processor.test_batch import BUCKET, Env
from tests.helpers import read_rows

pytestmark = pytest.mark.spark

BIG = "x" * (50 * 1024 * 1024)
_FULL_GZ = gzip.compress(
    b"".join(b'{"id":"%d","r":"%s"}\n' % (i, random.Random(i).randbytes(16).hex().encode()) for i in range(2000))
)
TRUNCATED = _FULL_GZ[: len(_FULL_GZ) // 2]  # cut in the middle of the deflate stream
DEEP = "{" + '"a":{' * 2000 + '"z":1' + "}" * 2001
FILES: dict[str, bytes] = {
    "in/mixed.json": (
        b'{"id":"1"}\nnot json\n[1,2]\n42\n{"id":"2"} junk\n{"id":"3"}{"id":"4"}\n{"v":"\xff"}\n{"id":"5"}\n'
    ),
    "in/empty.json": b"",
    "in/all bad.json": b'null\n"a"\n[1]\n',
    "in/blank.json": b"\n  \n\r\n",
    "in/big line.json": json.dumps({"id": "big", "blob": BIG}).encode() + b"\n",
    "in/deep.json": DEEP.encode() + b"\n",
    "in/dupkeys.json": b'{"k":1,"k":2,"K":3}\n',
    "in/drift1.json": b'{"n":1}\n',
    "in/drift2.json": b'{"n":"one"}\n{"n":{"x":1}}\n',
    "in/truncated.json.gz": TRUNCATED,
    "in/not gzip.json.gz": b'{"id":"plain text named .gz"}\n',
    "in/ü +%20 name.json": b'{"id":"odd-name"}\n',
}


@pytest.fixture(scope="module")
def outcome(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bad")
    env = Env(root, allowed_buckets=BUCKET, allowed_prefixes="in/")
    entries = [env.put(key, body) for key, body in FILES.items()]
    t0 = datetime.now(UTC)
    outside = [
        ManifestEntry(bucket="other-bucket", key="in/x.json", size=1, etag="e", event_time=t0),
        ManifestEntry(bucket=BUCKET, key="elsewhere/x.json", size=1, etag="e", event_time=t0),
    ]
    schema_fail = Manifest.of(entries[:1]).to_json().replace(b'"schema_version":2', b'"schema_version":9')
    record = env.job(spark).run(
        [
            env.manifest("m1", entries + outside),
            ("file:///m/not-json.json", "{oops"),
            ("file:///m/schema.json", schema_fail.decode()),
        ],
        0,
    )
    rows = read_rows(root / "output")
    return {
        "record": record,
        "rows": rows,
        "quarantine": env.quarantine(),
        "status": {s.key: s for s in record.sources},
    }


def reasons(outcome: dict[str, Any], source: str) -> dict[Any, str]:
    return {q.get("line"): q["reason"] for q in outcome["quarantine"] if q["source_uri"] == source}


def test_bad_lines_are_quarantined_with_line_and_reason(outcome: dict[str, Any]) -> None:
    got = reasons(outcome, f"s3://{BUCKET}/in/mixed.json")
    assert got == {
        2: T.REASON_MALFORMED,
        3: T.REASON_ARRAY,
        4: T.REASON_SCALAR,
        5: T.REASON_TRAILING,
        6: T.REASON_TRAILING,
        7: T.REASON_NOT_UTF8,
    }
    good = sorted(r["_line"] for r in outcome["rows"] if r["_source_uri"] == f"s3://{BUCKET}/in/mixed.json")
    assert good == [1, 8]


def test_non_utf8_line_is_never_stored_changed(outcome: dict[str, Any]) -> None:
    (q,) = [q for q in outcome["quarantine"] if q["reason"] == T.REASON_NOT_UTF8]
    assert q["line"] == 7
    assert not [r for r in outcome["rows"] if "v" in r and r["v"] is not None]


def test_empty_and_blank_files_are_read_and_yield_nothing(outcome: dict[str, Any]) -> None:
    for key in ("in/empty.json", "in/blank.json"):
        assert outcome["status"][key].status == "empty"
        assert outcome["status"][key].reason is None
        assert reasons(outcome, f"s3://{BUCKET}/{key}") == {}


def test_an_object_of_only_bad_lines_is_told_from_an_empty_one(outcome: dict[str, Any]) -> None:
    source = outcome["status"]["in/all bad.json"]
    assert (source.status, source.records, source.bad_records) == ("empty", 0, 3)
    assert source.reason == f"{REASON_ALL_BAD} (3)"
    assert sorted(reasons(outcome, f"s3://{BUCKET}/in/all bad.json")) == [1, 2, 3]


def test_a_50_mb_line_and_deep_nesting_are_ingested(outcome: dict[str, Any]) -> None:
    (big,) = [r for r in outcome["rows"] if r.get("id") == "big"]
    assert len(big["blob"]) == len(BIG)
    (deep,) = [r for r in outcome["rows"] if r["_source_uri"].endswith("deep.json")]
    assert deep["a"] == DEEP[len('{"a":') : -1]  # the nested value's compact JSON text, 2000 levels deep


def test_duplicate_keys_case_variants_and_type_drift(outcome: dict[str, Any]) -> None:
    (dup,) = [r for r in outcome["rows"] if r["_source_uri"].endswith("dupkeys.json")]
    # a duplicate key: the last value wins; "K" beside "k", both new with one value each: the tie
    # goes to the lower case, and the other case's value is in _extra under its own key
    assert (dup["k"], dict(dup["_extra"] or {})) == ("2", {"K": "3"})
    drift = sorted(r["n"] for r in outcome["rows"] if "drift" in r["_source_uri"])
    assert drift == sorted(['{"x":1}', "1", "one"])


def test_an_object_that_is_not_gzip_is_quarantined_whole(outcome: dict[str, Any]) -> None:
    key = "in/not gzip.json.gz"
    assert outcome["status"][key].status == "unreadable"
    assert "could not be read or decompressed" in reasons(outcome, f"s3://{BUCKET}/{key}")[None]
    assert not [r for r in outcome["rows"] if r["_source_uri"].endswith("not gzip.json.gz")]


def test_a_truncated_gzip_loads_its_lines_before_the_cut_and_says_from_where_not(outcome: dict[str, Any]) -> None:
    uri = f"s3://{BUCKET}/in/truncated.json.gz"
    loaded = sorted(r["_line"] for r in outcome["rows"] if r["_source_uri"] == uri)
    assert loaded and loaded == list(range(1, len(loaded) + 1)) and len(loaded) < 2000
    assert outcome["status"]["in/truncated.json.gz"].status == "ingested"
    assert outcome["status"]["in/truncated.json.gz"].records == len(loaded)
    assert f"lines from {len(loaded) + 1} on were not loaded" in str(outcome["status"]["in/truncated.json.gz"].reason)
    why = reasons(outcome, uri)[None]
    assert "could not be read or decompressed" in why and f"lines from {len(loaded) + 1} on were not loaded" in why


def test_bad_manifests_and_entries_outside_the_allowed_places(outcome: dict[str, Any]) -> None:
    q = {(x["kind"], x["source_uri"]): x["reason"] for x in outcome["quarantine"]}
    assert "invalid manifest" in q[("manifest", "file:///m/not-json.json")]
    assert "schema_version" in q[("manifest", "file:///m/schema.json")]
    assert "allowed_buckets" in q[("file", "s3://other-bucket/in/x.json")]
    assert "allowed_prefixes" in q[("file", f"s3://{BUCKET}/elsewhere/x.json")]
    assert outcome["record"].stats.bad_manifests == 2


def test_odd_key_names_are_ingested(outcome: dict[str, Any]) -> None:
    assert [r["_source_uri"] for r in outcome["rows"] if r.get("id") == "odd-name"] == [
        f"s3://{BUCKET}/in/ü +%20 name.json"
    ]


def test_counts_add_up(outcome: dict[str, Any]) -> None:
    s = outcome["record"].stats
    assert s.records_out == len(outcome["rows"])
    assert s.bad_records == sum(1 for q in outcome["quarantine"] if q["kind"] == "line")
    assert s.records_in == s.records_out + s.bad_records


def test_event_faults(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    a = env.put("in/a.json", b'{"a":1}\n')
    b = env.put("in/b.json", b'{"b":1}\n')
    # the same notification in two Lambda batches -> two manifests listing the same object
    job.run([env.manifest("m1", [a])], 0)
    second = job.run([env.manifest("m2", [a, b])], 1)
    assert {s.key: s.status for s in second.sources} == {"in/a.json": "duplicate", "in/b.json": "ingested"}
    assert "already ingested by batch 0" in next(s.reason for s in second.sources if s.key == "in/a.json")
    # ... and after a restart, from the ledger
    again = env.job(spark).run([env.manifest("m3", [a])], 2)
    assert [s.status for s in again.sources] == ["duplicate"]
    # an object overwritten after its event: this event is superseded by the newer version's own event
    overwritten = env.put("in/c.json", b'{"c":"new"}\n').model_copy(
        update={"event_time": datetime.now(UTC) - timedelta(minutes=10), "etag": "old-etag"}
    )
    rec = job.run([env.manifest("m4", [overwritten])], 3)
    assert [(s.status, s.reason) for s in rec.sources] == [
        ("superseded", "object overwritten after its event (a newer eTag)")
    ]
    rows = read_rows(tmp_path / "output")
    assert sorted(json.dumps(r.get("a")) + json.dumps(r.get("b")) for r in rows) == ['"1"null', 'null"1"']


def test_late_event_latency(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    body = b'{"x":1}\n'
    entry = env.put("in/x.json", body)
    path = env.buckets.path_of(BUCKET, "in/x.json")
    old = datetime.now(UTC) - timedelta(hours=2)
    import os

    os.utime(path, (old.timestamp(), old.timestamp()))
    rec = env.job(spark).run([env.manifest("m", [entry.model_copy(update={"event_time": old})])], 0)
    assert [s.status for s in rec.sources] == ["ingested"]
    assert rec.stats.max_latency_s is not None and rec.stats.max_latency_s >= 7200


def test_poison_batch_is_quarantined_after_max_attempts(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Env(tmp_path, max_batch_attempts="2")
    manifest = env.manifest("m", [env.put("in/x.json", b'{"x":1}\n')])
    job = env.job(spark)
    real = job._run

    def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("executor lost")

    monkeypatch.setattr(job, "_run", boom)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            job.run([manifest], 4)
    monkeypatch.setattr(job, "_run", real)
    record = job.run([manifest], 4)
    assert record.stats.bad_manifests == 1 and record.stats.records_out == 0
    (q,) = env.quarantine()
    assert q["kind"] == "manifest" and "failed 2 times" in q["reason"] and "executor lost" in q["reason"]
