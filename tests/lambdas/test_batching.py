"""Invariants of packing objects into manifests, checked on generated batches."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.layout import manifest_key
from contracts.manifest import ManifestEntry
from lambdas.manifest_builder.batching import MessageEntries, plan_manifests

T0 = datetime(2026, 11, 22, tzinfo=UTC)

entries = st.builds(
    ManifestEntry,
    bucket=st.sampled_from(["bucket-a", "bucket-b"]),
    key=st.text(alphabet="ab/ü +%.", min_size=1, max_size=6).map(lambda k: k + ".json"),
    size=st.integers(min_value=0, max_value=500),
    etag=st.sampled_from(["e1", "e2"]),
    event_time=st.just(T0),
)
messages = st.lists(st.lists(entries, min_size=0, max_size=3), max_size=30).map(
    lambda groups: [MessageEntries(f"m{i}", tuple(g)) for i, g in enumerate(groups)]
)
bounds = st.tuples(st.integers(min_value=1, max_value=1200), st.integers(min_value=1, max_value=7))


@settings(max_examples=200, deadline=None)
@given(messages, bounds)
def test_every_accepted_object_in_exactly_one_manifest(batch: list[MessageEntries], bound: tuple[int, int]) -> None:
    max_bytes, max_files = bound
    plan = plan_manifests(batch, max_bytes=max_bytes, max_files=max_files)
    listed = [e.identity for p in plan.manifests for e in p.manifest.entries]
    distinct = {e.identity for m in batch for e in m.entries}
    assert sorted(listed) == sorted(distinct)
    assert plan.duplicates_dropped == sum(len(m.entries) for m in batch) - len(distinct)


@settings(max_examples=200, deadline=None)
@given(messages, bounds)
def test_bounds_respected(batch: list[MessageEntries], bound: tuple[int, int]) -> None:
    max_bytes, max_files = bound
    for planned in plan_manifests(batch, max_bytes=max_bytes, max_files=max_files).manifests:
        m = planned.manifest
        assert m.file_count <= max_files
        # a single object larger than the bound gets a manifest of its own
        assert m.total_bytes <= max_bytes or m.file_count == 1


@settings(max_examples=100, deadline=None)
@given(messages, bounds, st.randoms())
def test_names_deterministic_whatever_the_message_order(
    batch: list[MessageEntries], bound: tuple[int, int], rnd: object
) -> None:
    max_bytes, max_files = bound
    shuffled = list(batch)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    names = lambda b: sorted(  # noqa: E731
        manifest_key("m/", p.manifest) for p in plan_manifests(b, max_bytes=max_bytes, max_files=max_files).manifests
    )
    assert names(batch) == names(shuffled)


def test_message_ids_follow_their_entries() -> None:
    e = lambda k: ManifestEntry(bucket="bkt", key=k, size=10, etag="e", event_time=T0)  # noqa: E731
    plan = plan_manifests(
        [MessageEntries("m1", (e("a.json"),)), MessageEntries("m2", (e("b.json"),))],
        max_bytes=15,
        max_files=10,
    )
    assert [sorted(p.message_ids) for p in plan.manifests] == [["m1"], ["m2"]]


def test_of_two_events_of_one_version_the_newest_is_listed() -> None:
    # Given identical bytes uploaded twice (same eTag): two events, the older one's message id first
    older = ManifestEntry(bucket="bkt", key="a.json", size=1, etag="e", event_time=T0, sequencer="0055AED6DCD90281E5")
    newer = ManifestEntry(
        bucket="bkt", key="a.json", size=1, etag="e", event_time=T0.replace(second=5), sequencer="0055AED6DCD9028200"
    )
    plan = plan_manifests(
        [MessageEntries("aaa-first", (older,)), MessageEntries("zzz-second", (newer,))], max_bytes=100, max_files=10
    )
    # Then the manifest lists the newer event (the job's overwrite check accepts it), once
    ((planned),) = plan.manifests
    assert planned.manifest.entries == (newer,)
    assert plan.duplicates_dropped == 1


def test_sequencers_compare_as_padded_hex() -> None:
    from lambdas.manifest_builder.batching import sequencer_order

    assert sequencer_order("FF") < sequencer_order("100")  # shorter is padded, not compared as text
    assert sequencer_order(None) < sequencer_order("1")
