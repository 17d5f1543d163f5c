"""How keys are named as columns: ``column_names`` names a set of keys (linear in them, whatever
their cases), and a new key becomes a column only when no column of the table is renamed by it
(``ndjson.StableNames``)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.column_names import fit
from glue_processor.read import ndjson as T
from glue_processor.read.extra import admit


def _reference_names(keys: list[str]) -> list[tuple[str, str]]:
    """column_names as it was first written (quadratic in the case variants of a key): the naming
    every table so far was written with, which the linear one must give again."""
    taken = {name.lower() for name in T.RESERVED_COLUMNS}
    mapping: list[tuple[str, str]] = []
    for key in sorted(set(keys)):
        base = key if key else "_empty_key"
        name, n = base, 1
        while name.lower() in taken:
            n += 1
            name = fit(base, f"__{n}")
        taken.add(name.lower())
        mapping.append((key, name))
    return sorted(mapping, key=lambda kv: (kv[1].lower(), kv[1]))


# cases that lower-case oddly: capital sigma (by its neighbours), dotted I (to two characters),
# the Kelvin sign (to ASCII k), a title-case digraph; and keys at the length limits, which fit() cuts
# (128 characters of ASCII; 21 Greek ones: 6 request bytes each)
words = st.text(alphabet="kK_2\u03a3\u03c3\u03c2\u0391\u03b1\u0130i\u212a\u01c5\u01c4\u01c6", min_size=1, max_size=3)
long_keys = st.builds(
    lambda body, n, tail: (body * 128)[:n] + tail,
    st.sampled_from(["k", "K", "kK", "\u03a3", "\u03c3", "\u03c3\u03a3"]),
    st.integers(18, 127),
    st.sampled_from(["", "\u03a3", "\u03c2", "K", "_2"]),
)
reserved = st.sampled_from(["_extra", "_Extra", "_line", "_line__2", ""])


@settings(max_examples=3000, deadline=None)
@given(st.lists(words | long_keys | reserved, min_size=2, max_size=9))
def test_column_names_name_every_set_as_they_always_did(keys: list[str]) -> None:
    keys = [k for k in keys if T.nameable(k)]
    assert T.column_names(keys) == _reference_names(keys)


@pytest.mark.parametrize(
    "alphabet",
    [("\u03a3", "\u03c3", "\u03c2", "\u03b1"), ("k", "K", "\u212a", "\u0130", "i", "_2"), ("_line", "_L", "__2", "_")],
)
def test_column_names_name_small_sets_of_tricky_words_as_they_always_did(alphabet: tuple[str, ...]) -> None:
    # every set of up to six words of up to three letters, 20,000 drawn (seeded): where case
    # variants crowd together (capital sigma lowers by its neighbours; dotted I to two characters)
    words = ["".join(p) for n in range(1, 4) for p in itertools.product(alphabet, repeat=n)]
    words = [w for w in words if T.nameable(w)]
    rng = random.Random(27)
    for _ in range(20_000):
        keys = rng.sample(words, rng.randint(2, 6))
        assert T.column_names(keys) == _reference_names(keys), keys


def test_column_names_of_many_case_variants_cost_a_fit_or_two_each(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given 281 case variants of a 100-character key (the quadratic naming fit() ~40,000 suffixes)
    keys = ["".join("K" if (i >> j) & 1 else "k" for j in range(9)) + "k" * 91 for i in range(281)]
    calls = []
    real = T.fit
    monkeypatch.setattr(T, "fit", lambda name, suffix="": calls.append(1) or real(name, suffix))
    names = T.column_names(keys)
    # Then each key tried at most two suffixes, and the names are the ones the table always had
    assert len(calls) <= 2 * len(keys)
    monkeypatch.setattr(T, "fit", real)
    assert names == _reference_names(keys)


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
    joined = [k for k in crafted if names.join(k)]
    # Then at most SLOW_CHECKS namings of the set were made, and no known key was renamed
    assert names.checks <= T.StableNames.SLOW_CHECKS
    assert _renamed(known, joined) == {}


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
