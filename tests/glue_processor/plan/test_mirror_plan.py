"""Which objects of a mirroring table's share are read, and whose rows they replace or retract
(glue_processor/plan/mirror.py: pure, no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contracts.manifest import ManifestEntry
from glue_processor.keys.state import KeyState, Segment
from glue_processor.plan.manifests import SourceFile
from glue_processor.plan.mirror import classify

T0 = datetime(2026, 11, 1, tzinfo=UTC)
LOADED = KeyState(
    table="t",
    bucket="landing",
    key="a.json",
    version_id="v2",
    etag="e2",
    sequencer="0B",
    event_time=T0,
    segments=(Segment(query_id="q", batch_id=3),),
)


def _deletion(version: str | None) -> SourceFile:
    entry = ManifestEntry(
        bucket="landing",
        key="a.json",
        size=0,
        etag="removed-0C",
        event_time=T0 + timedelta(days=1),
        sequencer="0C",
        version_id=version,
        event="removed",
    )
    return SourceFile(entry=entry, manifest_uri="m", read_uri="s3://landing/a.json", table="t")


def test_a_noncurrent_version_deleted_for_good_retracts_nothing() -> None:
    # Given v2 loaded and current, when v1 (noncurrent) is deleted for good, then v2's rows stay
    plan = classify("t", [], {LOADED.ident: LOADED}, removals=[_deletion("v1")], retract=True)
    assert plan.replacing == []
    assert [(s, why) for _, s, why in plan.skipped] == [
        ("deleted", "version v1 was deleted, not the one loaded (v2): its rows stay")
    ]


def test_a_delete_marker_or_the_loaded_version_deleted_retracts_it() -> None:
    for version in (None, "v2"):
        plan = classify("t", [], {LOADED.ident: LOADED}, removals=[_deletion(version)], retract=True)
        assert [(r.state.version_id, r.retracts) for r in plan.replacing] == [("v2", True)], version
