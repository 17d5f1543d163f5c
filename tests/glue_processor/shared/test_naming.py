"""How keys are named as columns: ``column_names`` names a set of keys (linear in them, whatever
their cases), and a new key becomes a column only when no column of the table is renamed by it
(``names.StableNames``)."""

from __future__ import annotations

import itertools
import json
import random
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.column_names import fit
from glue_processor.read.ndjson import parse_ndjson
from glue_processor.shared import names as T
from glue_processor.shared.extra import admit
from glue_processor.shared.spec import TaskSpec


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


@pytest.mark.parametrize(
    "keys",
    [
        # 281 case variants of a 100-character key (the quadratic naming fit() ~40,000 suffixes)
        ["".join("K" if (i >> j) & 1 else "k" for j in range(9)) + "k" * 91 for i in range(281)],
        # 800 128-character keys in case pairs that the cut makes alike: every suffixed name of one
        # is every other's (not case variants of each other; 3,000 took 1.1 million fit() calls, 63 s)
        [
            "p" * 124 + tail
            for t in itertools.islice(itertools.product("abcdefghijklmnopqrstuvwxyz", repeat=4), 400)
            for tail in ("".join(t), "".join(t).upper())
        ],
    ],
    ids=["case variants", "alike once cut"],
)
def test_column_names_cost_a_few_fits_a_key_whatever_the_keys(keys: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = T.fit
    monkeypatch.setattr(T, "fit", lambda name, suffix="": calls.append(1) or real(name, suffix))
    names = T.column_names(keys)
    # Then each key cut at most a few suffixes (one a digit count, and its own), and the names are
    # the ones the table always had
    assert len(calls) <= 5 * len(keys)
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
    assert names.checks == 1  # "kind" was free; "Kind" was checked by naming the sets again
    assert dict(T.column_names(["other", "kind", "Kind"]))["kind"] == "kind__2"


@pytest.mark.parametrize("held", ["kind__2", "Kind__2"])
def test_no_new_key_takes_the_name_a_share_set_aside_gives_its_key(held: str) -> None:
    # Given a share set aside with a key "kind__2" (or "Kind__2") the table does not have
    names = T.StableNames({"a"}, {held})
    # When "kind" and "Kind" come: the batch's files would name them "Kind" and "kind__2"
    assert names.join("kind")
    assert not names.join("Kind")
    # Then the batch names kind "kind", and the held key keeps its name once its share is in
    assert dict(T.column_names(["a", "kind"]))["kind"] == "kind"
    assert dict(T.column_names(["a", "kind", held]))[held] == held


def test_a_held_key_a_row_brings_joins_with_the_name_its_share_gives_it() -> None:
    names = T.StableNames({"a"}, {"kind__2"})
    assert names.join("kind__2")
    assert not names.join("KIND__2")  # another case of a held key: never a column


def test_admit_sends_a_refused_key_to_extra_and_keeps_the_rest_in_order() -> None:
    keys, seen = ["kind__2"], {"kind__2"}
    names = T.StableNames(seen)
    spill = admit(keys, seen, ["kind", "Kind", "b"], 10, names.join)
    assert (keys, spill) == (["kind__2", "kind", "b"], ["Kind"])
    # a refusal is remembered: the next object with it costs no check
    checks = names.checks
    assert admit(keys, seen, ["Kind"], 10, names.join) == ["Kind"] and names.checks == checks


def test_thousands_of_case_variants_cost_a_bounded_number_of_keys_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a table of 200 keys, 300 held, and a batch of 30,000 new keys: the cases of a few new
    # names, and the suffixes of those cases (each joining one would be checked by naming the sets)
    known = {f"key{i:03d}" for i in range(200)}
    held = {f"held{i:03d}" for i in range(300)}
    crafted = [
        f"{''.join('Z' if (i >> j) & 1 else 'z' for j in range(8))}{w}{s}"
        for w in "abcdefghijklmno"
        for i in range(256)
        for s in ("", "__2", "__3", "__4", "__5", "__6", "__7", "__8")
    ]
    assert len(crafted) == 30_720
    named = []
    real = T.column_names
    monkeypatch.setattr(T, "column_names", lambda keys: named.append(len(keys)) or real(keys))
    names = T.StableNames(known, held)
    joined = [k for k in crafted if names.join(k)]
    # Then the sets were named again for at most CHECK_KEYS keys in all (once each to start with)
    assert sum(named[2:]) <= T.StableNames.CHECK_KEYS
    assert names.checks > 10 and len(joined) > 15
    # And no key moved: the known ones in the batch's set, known and held in the table's to come
    monkeypatch.setattr(T, "column_names", real)
    assert _renamed(known, joined) == {} and _renamed(known | held, joined) == {}


# Keys whose names crowd: cases and suffixes of one name, and of the job's own columns
CROWDED = ["a", "A", "a__2", "A__2", "a__3", "a__2__2", "A__2__2", "_extra", "_Extra", "_extra__2", "b", ""]
NOW = datetime.now(UTC)


def _brought(known: set[str], held: set[str], found: list[str]) -> list[str]:
    """The new keys a parse task reports for a row of ``found`` (another case of a key of the
    table or of a held one goes to _extra there)."""
    spec = TaskSpec(0, (), tuple(sorted(known)), "", "", 0, NOW, 1, held=tuple(sorted(held)))
    row = json.dumps(dict.fromkeys(found, "v")).encode()
    parsed = parse_ndjson(row, spec.known, taken=spec.taken, exact=spec.exact)
    return [k for k in parsed.keys if k not in known]


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["publish", "set aside", "publish one set aside", "abandon one set aside"]),
            st.lists(st.sampled_from(CROWDED)),
            st.integers(0, 5),
        ),
        min_size=2,
        max_size=7,
    )
)
def test_through_batches_published_and_set_aside_no_key_moves_and_no_column_is_two_keys(
    steps: list[tuple[str, list[str], int]],
) -> None:
    # Given batches that bring crowded keys, published in turn, or set aside and then published later
    # in any order or abandoned (a share's files are named by its own keys, and the table takes their
    # union by name)
    known: set[str] = set()
    aside: list[set[str]] = []
    table: dict[str, str] = {}  # key -> its column

    def publish(keys: set[str]) -> None:
        for key, name in T.column_names(sorted(keys)):
            # Then no key ever moves to another column, and no column ever holds two keys
            assert table.get(key, name) == name, (key, name, table)
            assert all(n.lower() != name.lower() for k, n in table.items() if k != key), (key, name, table)
            table[key] = name
        known.update(keys)

    for action, found, which in steps:
        if action.endswith("one set aside"):
            if aside:
                share = aside.pop(which % len(aside))
                if action.startswith("publish"):
                    publish(share)
            continue
        held = set().union(*aside) - known
        keys = sorted(known)
        admit(keys, set(keys), _brought(known, held, found), 100, T.StableNames(known, held).join)
        if action == "publish":
            publish(set(keys))
        else:
            aside.append(set(keys))
    while aside:
        publish(aside.pop())
