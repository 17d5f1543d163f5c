from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from contracts.exceptions import ManifestError
from contracts.layout import manifest_data_bytes, manifest_key
from contracts.manifest import Manifest, ManifestEntry

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def entry(key: str, size: int = 10, etag: str = "e") -> ManifestEntry:
    return ManifestEntry(bucket="bkt", key=key, size=size, etag=etag, event_time=T0)


def test_manifest_round_trips_and_is_order_independent() -> None:
    a = Manifest.of([entry("a"), entry("b", 5)])
    b = Manifest.of([entry("b", 5), entry("a")])
    assert a == b
    assert a.to_json() == b.to_json()
    assert Manifest.from_json(a.to_json()) == a
    assert a.total_bytes == 15 and a.file_count == 2


def test_manifest_key_is_a_function_of_content() -> None:
    m = Manifest.of([entry("a")])
    assert manifest_key("manifests", m) == manifest_key("/manifests/", m)
    assert manifest_key("manifests", m) == f"manifests/20261122T100000Z-{m.manifest_id[:32]}-{m.total_bytes}b.json"
    assert manifest_data_bytes(manifest_key("manifests", m)) == m.total_bytes
    assert manifest_data_bytes(f"20261122T100000Z-{m.manifest_id[:32]}.json") is None  # an older name
    assert manifest_key("manifests", Manifest.of([entry("a", etag="other")])) != manifest_key("manifests", m)


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ("{not json", "Invalid JSON"),
        ('{"schema_version": 3}', "schema_version"),
        (
            '{"schema_version": 1, "manifest_id": "x", "file_count": 1, "total_bytes": 0, "entries": []}',
            "entries",
        ),
    ],
)
def test_invalid_manifests_raise_a_named_error(payload: str, fragment: str) -> None:
    with pytest.raises(ManifestError, match=r"s3://b/m\.json") as info:
        Manifest.from_json(payload, source="s3://b/m.json")
    assert fragment in str(info.value)


def test_tampered_manifest_is_rejected() -> None:
    m = Manifest.of([entry("a"), entry("b")])
    tampered = m.to_json().replace(b'"key":"b"', b'"key":"c"')
    with pytest.raises(ManifestError, match="manifest_id"):
        Manifest.from_json(tampered)


def test_naive_event_time_is_rejected() -> None:
    with pytest.raises(ValueError, match="time zone"):
        ManifestEntry(bucket="bkt", key="k", size=1, etag="e", event_time=datetime(2026, 1, 1))


def test_version_1_manifests_still_read_and_version_2_carries_version_ids() -> None:
    from datetime import UTC, datetime

    from contracts.manifest import Manifest, ManifestEntry

    t = datetime(2026, 11, 22, tzinfo=UTC)
    v1 = {
        "schema_version": 1,
        "manifest_id": "",
        "file_count": 1,
        "total_bytes": 3,
        "entries": [{"bucket": "bkt", "key": "a.json", "size": 3, "etag": "e1", "event_time": t.isoformat()}],
    }
    entry = ManifestEntry(bucket="bkt", key="a.json", size=3, etag="e1", event_time=t)
    v1["manifest_id"] = Manifest.of([entry]).manifest_id
    old = Manifest.from_json(json.dumps(v1))
    assert old.schema_version == 1 and old.entries[0].version_id is None
    new = Manifest.of([entry.model_copy(update={"version_id": "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"})])
    again = Manifest.from_json(new.to_json())
    assert again.schema_version == 2 and again.entries[0].version_id == "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"
    assert again.manifest_id == old.manifest_id  # the same object content: the same manifest identity
