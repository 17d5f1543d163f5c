"""The keys a table's shares set aside hold (glue_processor.plan.memory.Held): a day of a table out
of reach is ~2,880 shares, mostly with the same keys; each distinct key set is stored once, and
their union is counted, not walked."""

from __future__ import annotations

from glue_processor.plan.memory import Held


def test_a_day_of_shares_with_the_same_keys_stores_them_once_and_releases_them_one_by_one() -> None:
    held = Held()
    keys = tuple(f"k{i:04d}" for i in range(1000))
    for batch in range(2880):
        held.add(("q", batch), tuple(keys))  # a new tuple each time, as read from each record
    held.add(("q", 9999), ("other",))
    assert len(held._sets) == 2 and all(held.shares[("q", b)] is held.shares[("q", 0)] for b in range(2880))
    assert held.keys() == {*keys, "other"}
    for batch in range(2879):
        held.remove(("q", batch))
    assert held.keys() == {*keys, "other"}  # one share still holds them
    held.remove(("q", 2879))
    held.remove(("q", 9999))
    held.remove(("q", 9999))  # twice: nothing more
    assert held.keys() == set() and not held._sets and not held.shares


def test_a_share_held_again_replaces_what_it_held() -> None:
    held = Held()
    held.add(("q", 1), ("a", "b"))
    held.add(("q", 1), ("b",))  # a restart's replay holds it again
    assert held.keys() == {"b"}
    held.remove(("q", 1))
    assert held.keys() == set()
