"""A new key becomes a column only when no column of the table is renamed by it: ``column_names``
names a set of keys, and a key joining the set can move another key's name (``ndjson.StableNames``)."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from glue_processor.read import ndjson as T
from glue_processor.read.extra import admit


def _renamed(protected: set[str], joined: list[str]) -> dict[str, tuple[str, str]]:
    before = dict(T.column_names(tuple(protected)))
    after = dict(T.column_names((*protected, *joined)))
    return {k: (before[k], after[k]) for k in protected if before[k] != after[k]}


def test_two_new_cases_of_a_key_cannot_take_a_known_suffixed_name() -> None:
    # Given a table with the key "kind__2" (its column so named)
    names = T.StableNames({"kind__2"})
    # When "kind" and then "Kind" come (together, "Kind", "kind__2" and "kind__2__2" for the old key)
    assert names.join("kind")
    assert not names.join("Kind")
    # Then the one that would rename the old key's column is refused
    assert _renamed({"kind__2"}, ["kind"]) == {}
    assert _renamed({"kind__2"}, ["kind", "Kind"]) == {"kind__2": ("kind__2", "kind__2__2")}


def test_new_cases_of_each_other_are_still_two_columns_when_no_known_name_moves() -> None:
    names = T.StableNames({"other"})
    assert names.join("kind") and names.join("Kind")
    assert names.checks == 1  # "kind" was free; "Kind" was checked by naming the set again
    assert dict(T.column_names(["other", "kind", "Kind"]))["kind"] == "kind__2"


def test_a_held_key_keeps_its_name_too_and_joins_when_a_row_brings_it() -> None:
    # Given a share set aside holding "kind__2", and a table without it
    names = T.StableNames({"a", "kind__2"})
    assert names.join("kind__2")  # a row of a later share with that very key: its own column
    assert names.join("kind") and not names.join("Kind")


def test_admit_sends_a_refused_key_to_extra_and_keeps_the_rest_in_order() -> None:
    keys, seen = ["kind__2"], {"kind__2"}
    names = T.StableNames(seen)
    spill = admit(keys, seen, ["kind", "Kind", "b"], 10, names.join)
    assert (keys, spill) == (["kind__2", "kind", "b"], ["Kind"])
    # a refusal is remembered: the next object with it costs no check
    checks = names.checks
    assert admit(keys, seen, ["Kind"], 10, names.join) == ["Kind"] and names.checks == checks


def test_thousands_of_case_variants_cost_a_bounded_number_of_checks() -> None:
    # Given a table of 280 keys, and a batch of 20,000 distinct cases and suffixes of them
    known = {f"key{i:03d}" for i in range(280)}
    names = T.StableNames(known)
    crafted = [f"{k[:j].upper()}{k[j:]}{s}" for k in sorted(known) for j in range(1, 7) for s in ("", "__2", "__3")]
    crafted += [f"kEy{i:03d}__{n}" for i in range(280) for n in range(4, 50)]
    assert len(crafted) > 17_000
    start = time.process_time()
    joined = [k for k in crafted if names.join(k)]
    elapsed = time.process_time() - start
    # Then at most SLOW_CHECKS namings of the set were made, and no known key was renamed
    assert names.checks <= T.StableNames.SLOW_CHECKS
    assert _renamed(known, joined) == {}
    assert elapsed < 30  # a bound on the design (64 namings of ~300 keys), not a benchmark


keys = st.text(alphabet="kKiInN_2", min_size=0, max_size=7)


@settings(max_examples=400, deadline=None)
@given(st.sets(keys, max_size=8), st.lists(keys, max_size=12))
def test_no_key_that_joins_ever_renames_a_protected_one(protected: set[str], found: list[str]) -> None:
    names = T.StableNames(protected)
    joined: list[str] = []
    for k in dict.fromkeys(found):
        if k in protected:
            continue
        if names.join(k):
            joined.append(k)
        else:  # refused: it would have renamed one (or the checks ran out)
            assert _renamed(protected, [*joined, k]) or names.checks >= T.StableNames.SLOW_CHECKS
    assert _renamed(protected, joined) == {}
