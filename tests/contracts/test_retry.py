"""The one retry policy (contracts/retry.py): full jitter below a cap that doubles, for loops and for
callers that schedule their own tries."""

from __future__ import annotations

import random

import pytest

from contracts.retry import backoff_s


def test_a_scheduled_try_waits_below_a_cap_that_doubles_from_first_s_up_to_max_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the top of each draw is the cap: 1, 2, 4 ... s, never over max_s
    monkeypatch.setattr(random, "uniform", lambda low, high: high)
    assert [backoff_s(t, max_s=300.0) for t in (0, 1, 2, 8, 9, 30)] == [1.0, 2.0, 4.0, 256.0, 300.0, 300.0]
    assert backoff_s(2, first_s=0.5, max_s=10.0) == 2.0
    # and the bottom is zero: full jitter, so tries that failed together spread out
    monkeypatch.setattr(random, "uniform", lambda low, high: low)
    assert backoff_s(5) == 0.0
