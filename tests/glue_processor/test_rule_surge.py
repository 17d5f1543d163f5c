"""RuleViolationSurge: a rule broken far more often than its own usual, batch by batch (issue 47's
"alarm when a rule suddenly fails much more than usual", which no alarm naming a rule can be)."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts import metrics as M
from contracts.ledger import BatchStats, CommitRecord, TableShare
from glue_processor.metrics.rule_surge import WARM, RuleBaseline


def batch(n: int, **tables: tuple[int, dict[str, int]]) -> CommitRecord:
    """A committed batch whose tables had ``rows`` rows and these rules' broken rows."""
    shares = tuple(
        TableShare(table=t, stats=BatchStats(records_in=rows, rule_violations=broken))
        for t, (rows, broken) in tables.items()
    )
    return CommitRecord(
        query_id="q",
        batch_id=n,
        attempt="a",
        committed_at=datetime(2026, 11, 27, tzinfo=UTC),
        partition="p",
        manifests=(),
        quarantine_files=(),
        sources=(),
        tables=shares,
        stats=BatchStats(),
    )


def test_one_rule_s_jump_shows_beside_another_rule_s_usual_thousands() -> None:
    # Given an hour in which "amount" breaks 10 % of orders and "country" 0.5 % of clicks
    baseline = RuleBaseline()
    steady = [
        baseline.surge(batch(n, orders=(100_000, {"amount": 10_000}), clicks=(20_000, {"country": 100})))
        for n in range(60)
    ]
    # Then nothing surges while the shares keep to their usual (and nothing is compared while warming)
    assert steady[:WARM] == [0.0] * WARM and max(steady) < 1.5
    # When "country" jumps to 6 % of clicks, while the job's total hardly moves (10,100 -> 11,200)
    jump = baseline.surge(batch(60, orders=(100_000, {"amount": 10_000}), clicks=(20_000, {"country": 1_200})))
    # Then the surge says 12x, past the stack's alarm
    assert 11.5 < jump < 12.5 and jump > M.RULE_SURGE_ALARM


def test_a_rule_no_row_broke_surges_at_one_row_in_a_thousand_not_at_one_in_a_million() -> None:
    baseline = RuleBaseline()
    for n in range(WARM):
        baseline.surge(batch(n, orders=(1_000_000, {})))
    assert baseline.surge(batch(WARM, orders=(1_000_000, {"new": 1}))) < 1  # one in a million
    assert baseline.surge(batch(WARM + 1, orders=(1_000_000, {"new": 1_000}))) == 10.0  # one in a thousand


def test_a_small_batch_is_no_surge_and_a_restart_learns_again() -> None:
    baseline = RuleBaseline()
    for n in range(WARM):
        baseline.surge(batch(n, orders=(10_000, {})))
    # a batch of 10 rows, 5 broken: too few rows to say
    assert baseline.surge(batch(WARM, orders=(10, {"amount": 5}))) == 0.0
    # a restarted job (a new baseline) compares nothing for its first batches
    assert RuleBaseline().surge(batch(0, orders=(10_000, {"amount": 5_000}))) == 0.0
