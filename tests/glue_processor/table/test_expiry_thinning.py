"""The job's expiry thins the retention window to a bounded number of snapshots (issue 45), and
deleting what a thinned snapshot alone held stays exact.

Every commit rewrites the table's metadata, which lists every snapshot kept, and pyiceberg copies it
while it builds a commit: a table kept 6 hours of 30 s batches (720 snapshots) paid for them all on
every batch. The window now keeps the newest snapshot of each of ``TIME_TRAVEL_POINTS`` spans.
Deleting the files of snapshots expired from the middle of the line is checked here against the
full reachability diff (every manifest of every snapshot read: what Java Iceberg's
``ReachableFileCleanup`` does) on random histories of appends, merged appends, compactions and
replacements.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.table import Table

from glue_processor.table.compact import compact, referenced
from glue_processor.table.expiry import _full, _incremental, expire_snapshots, main_line, thinned
from glue_processor.table.iceberg import TIME_TRAVEL_POINTS, expire_now_and_then
from tests.glue_processor.table.test_expiry import TARGET, _catalog, _on_disk, _table, referenced_by

HOUR_MS = 3600 * 1000


class Snap:
    """What :func:`thinned` reads of a snapshot."""

    def __init__(self, snapshot_id: int, timestamp_ms: int) -> None:
        self.snapshot_id, self.timestamp_ms = snapshot_id, timestamp_ms


class Ref:
    def __init__(self, snapshot_id: int) -> None:
        self.snapshot_id = snapshot_id


class Meta:
    def __init__(self, snapshots: list[Snap], head: int) -> None:
        self.snapshots, self.refs = snapshots, {"main": Ref(head)}


def test_a_day_of_30_s_batches_keeps_the_newest_of_each_span_of_the_window_and_the_newest_ten() -> None:
    # Given a day of batches every 30 s (2,880 snapshots), 6 hours kept in the job's spans
    now_ms = 10**13
    snaps = [Snap(i, now_ms - (2880 - i) * 30_000) for i in range(2880)]
    span_ms = 6 * HOUR_MS // TIME_TRAVEL_POINTS
    cutoff = now_ms - 6 * HOUR_MS
    # When the expiry picks
    expired = thinned(Meta(snaps, head=2879), cutoff, keep=10, span_ms=span_ms)  # type: ignore[arg-type]
    kept = [s for s in snaps if s.snapshot_id not in expired]
    # Then what stays is bounded (the newest 10, one a span: points + 1 at most), whatever the history
    assert len(kept) <= 10 + TIME_TRAVEL_POINTS + 1
    assert all(s.timestamp_ms >= cutoff for s in kept)
    assert {s.snapshot_id for s in snaps[-10:]} <= {s.snapshot_id for s in kept}
    # And any moment of the window reads the table as it was at most one span earlier
    for moment in range(cutoff + span_ms, now_ms, 60_000):
        at = max(s.timestamp_ms for s in kept if s.timestamp_ms <= moment)
        assert moment - at <= span_ms
    # And half an hour later, what this round kept as its span's newest is kept still (spans are fixed
    # in time), unless the cut-off passed it
    later = [*snaps, *(Snap(2880 + i, now_ms + (i + 1) * 30_000) for i in range(60))]
    again = thinned(Meta(later, head=2939), cutoff + 1_800_000, keep=10, span_ms=span_ms)  # type: ignore[arg-type]
    newest_of_span = {s.snapshot_id for s in kept[:-10] if s.timestamp_ms >= cutoff + 1_800_000}
    assert newest_of_span and not newest_of_span & again


def test_without_spans_only_age_expires_and_a_ref_head_never_does() -> None:
    snaps = [Snap(i, 1000 * i) for i in range(20)]
    meta = Meta(snaps, head=19)
    meta.refs["audit"] = Ref(3)
    expired = thinned(meta, cutoff_ms=10_000, keep=2, span_ms=0)  # type: ignore[arg-type]
    assert expired == set(range(10)) - {3}


def _random_history(table: Table, rng: random.Random, steps: int) -> None:
    """Appends (merged: the table merges manifests past 4), compactions, and replacements (an
    overwrite that deletes one current file, as a replaced version's does)."""
    with table.transaction() as tx:
        tx.set_properties({"commit.manifest.min-count-to-merge": "4"})
    for n in range(steps):
        roll = rng.random()
        live = sorted((t.file for t in table.scan().plan_files()), key=lambda f: f.file_path)
        if roll < 0.6 or not live:
            table.append(pa.table({"n": [str(n)]}))
        elif roll < 0.75:
            compact(table, target_bytes=TARGET, include_open=True)
        else:
            victim = rng.choice(live)
            with table.transaction() as tx, tx.update_snapshot().overwrite() as overwrite:
                overwrite.delete_data_file(victim)
        table.refresh()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(6, 30), share=st.floats(0.1, 0.9))
def test_what_a_thinned_line_frees_is_exactly_what_no_kept_snapshot_reaches(
    tmp_path_factory: pytest.TempPathFactory, seed: int, steps: int, share: float
) -> None:
    tmp_path = tmp_path_factory.mktemp("thin")
    rng = random.Random(seed)
    table = _table(_catalog(tmp_path), tmp_path, merge=True)
    # Given a random history, and a random set of its snapshots to expire (never the head)
    _random_history(table, rng, steps)
    metadata = table.metadata
    line = main_line(metadata)
    assert line is not None
    expired = {s.snapshot_id for s in line[:-1] if rng.random() < share}
    # When the incremental plan and the full reachability diff each work out what only they held
    incremental = _incremental(line, expired, table.io)
    full = _full(metadata, expired, table.io)
    # Then they agree, file for file
    assert incremental is not None
    assert incremental.files == full.files


def test_thinning_a_real_table_keeps_every_kept_snapshot_whole_and_frees_the_rest(tmp_path: Path) -> None:
    table = _table(_catalog(tmp_path), tmp_path, merge=True)
    # Given 40 appends, merged, with compactions and replacements among them
    rng = random.Random(7)
    _random_history(table, rng, 40)
    before = len(table.metadata.snapshots)
    # (what each merge first wrote and then merged is referenced by no snapshot: orphan deletion's)
    listed = {m.manifest_path for s in table.metadata.snapshots for m in s.manifests(table.io)}
    merged_away = {f for f in _on_disk(table) if f.endswith(".avro") and "/snap-" not in f} - listed
    # When the window is thinned to 4 spans (what the job does with TIME_TRAVEL_POINTS)
    first = min(s.timestamp_ms for s in table.metadata.snapshots)
    now = datetime.now(UTC) + timedelta(seconds=1)
    window = now - datetime.fromtimestamp((first - 1) / 1000, UTC)
    done = expire_snapshots(table, max_age=window, keep=3, now=now, points=4)
    # Then at most the newest 3 and one a span stay, every one of them reads whole, and what is on
    # disk is exactly what they reference
    assert done.incremental and done.snapshots > 0
    assert len(table.metadata.snapshots) <= 3 + 5 < before
    for snapshot in table.metadata.snapshots:
        assert all(Path(f.removeprefix("file://")).exists() for f in referenced_by(table, snapshot.snapshot_id))
    assert _on_disk(table) - merged_away == referenced(table)


def test_rounds_of_thinning_keep_the_line_known_across_their_gaps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glue_processor.table import expiry

    def every_other(metadata: Any, cutoff_ms: int, keep: int, span_ms: int, **_: Any) -> set[int]:
        ordered = sorted(metadata.snapshots, key=lambda s: s.sequence_number)[:-keep]
        return {s.snapshot_id for s in ordered[1::2]}

    monkeypatch.setattr(expiry, "thinned", every_other)
    table = _table(_catalog(tmp_path), tmp_path, merge=True)
    rng = random.Random(11)
    # Given rounds of history, each thinned to every other snapshot (gaps in the line: pyiceberg
    # clears the parent of a snapshot whose parent expired)
    gaps = 0
    for _ in range(4):
        _random_history(table, rng, 12)
        done = expire_snapshots(table, max_age=timedelta(hours=1), keep=2, points=3)
        # Then every round is incremental (the line is known through the gaps the earlier ones left)
        assert done.incremental and done.snapshots > 0
        gaps += sum(s.parent_snapshot_id is None for s in table.metadata.snapshots[1:])
        assert main_line(table.metadata) is not None
        for snapshot in table.metadata.snapshots:
            assert all(Path(f.removeprefix("file://")).exists() for f in referenced_by(table, snapshot.snapshot_id))
    assert gaps > 0


def test_a_gap_the_job_did_not_record_is_no_line(tmp_path: Path) -> None:
    table = _table(_catalog(tmp_path), tmp_path)
    for n in range(5):
        table.append(pa.table({"n": [str(n)]}))
    middle = table.metadata.snapshots[2].snapshot_id
    # Given a snapshot expired from the middle by another tool (no predecessor recorded)
    table.maintenance.expire_snapshots().by_id(middle).commit()
    table.refresh()
    # Then the history is not known to be one line: the next expiry diffs what is reachable
    assert main_line(table.metadata) is None
    done = expire_snapshots(table, max_age=timedelta(0), keep=1, now=datetime.now(UTC) + timedelta(seconds=1))
    assert not done.incremental and done.snapshots == 3
    assert sorted(table.scan().to_arrow().column("n").to_pylist()) == [str(n) for n in range(5)]


def test_the_last_minutes_are_never_thinned() -> None:
    # Given an hour of 30 s snapshots in 4 spans, the last 20 minutes dense
    now_ms = 10**13
    snaps = [Snap(i, now_ms - (120 - i) * 30_000) for i in range(120)]
    dense_from = now_ms - 20 * 60_000
    expired = thinned(
        Meta(snaps, head=119),  # type: ignore[arg-type]
        now_ms - HOUR_MS,
        keep=2,
        span_ms=HOUR_MS // 4,
        dense_from_ms=dense_from,
    )
    # Then every snapshot of the last 20 minutes stays (a compaction started on one of them finds its
    # line by parent ids), and the older ones are thinned
    assert not any(s.snapshot_id in expired for s in snaps if s.timestamp_ms >= dense_from)
    assert sum(s.snapshot_id in expired for s in snaps if s.timestamp_ms < dense_from) >= 70


def test_a_rollback_while_the_expiry_plans_fails_its_commit_and_the_table_stays_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glue_processor.table import expiry

    table = _table(_catalog(tmp_path), tmp_path)
    for n in range(6):
        table.append(pa.table({"n": [str(n)]}))
    target = table.metadata.snapshots[2].snapshot_id
    real = expiry._incremental

    # Given an operator who rolls main back to a snapshot the plan is thinning, while it plans
    def planning(line: Any, expired: set[int], io: Any) -> Any:
        other = table.catalog.load_table(table.name())
        other.manage_snapshots().rollback_to_snapshot(target).commit()
        return real(line, expired, io)

    monkeypatch.setattr(expiry, "_incremental", planning)
    monkeypatch.setattr(expiry, "thinned", lambda metadata, *a, **k: {target})
    # When the job's round runs, Then its commit is refused (main moved) and logged, nothing deleted
    before = _on_disk(table)
    expire_now_and_then(table, 0, timedelta(hours=1))
    fresh = table.catalog.load_table(table.name())
    assert fresh.metadata.current_snapshot_id == target
    assert sorted(fresh.scan().to_arrow().column("n").to_pylist()) == ["0", "1", "2"]
    assert _on_disk(table) >= before - {f for f in before if f.endswith(".metadata.json")}


def test_a_format_1_table_is_thinned_by_the_full_diff(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    schema = pa.schema([("n", pa.string())])
    table = catalog.create_table(
        ("ingest", "v1"), schema=schema, location=(tmp_path / "v1").as_uri(), properties={"format-version": "1"}
    )
    for n in range(6):
        table.append(pa.table({"n": [str(n)]}))
    compact(table, target_bytes=TARGET, include_open=True)
    table.refresh()
    table.append(pa.table({"n": ["6"]}))
    # (its manifests carry no sequence numbers: the incremental plan could not tell what to free)
    first = min(s.timestamp_ms for s in table.metadata.snapshots)
    now = datetime.now(UTC) + timedelta(seconds=1)
    done = expire_snapshots(
        table, max_age=now - datetime.fromtimestamp((first - 1) / 1000, UTC), keep=2, now=now, points=2
    )
    assert not done.incremental and done.snapshots > 0
    assert _on_disk(table) == referenced(table)
    assert sorted(table.scan().to_arrow().column("n").to_pylist()) == [str(n) for n in range(7)]
