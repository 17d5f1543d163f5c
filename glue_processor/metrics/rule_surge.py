"""How much more often than usual a table's rule is broken: ``RuleViolationSurge``, per batch.

Rules are the routing file's, so no alarm of the stack can name one, and CloudWatch's anomaly band
of the job's total violations would hide one rule's jump behind another's usual thousands. The job
knows each rule's share of its table's rows batch by batch, so it keeps each (table, rule)'s usual
share (an exponential mean over the last ~:data:`WINDOW` batches it saw rows of the table) and
publishes, per batch, the highest ratio of a rule's share in the batch to its usual one; the stack's
alarm fires past :data:`contracts.metrics.RULE_SURGE_ALARM`. A share is compared only once the rule's
table has had :data:`WARM` batches since the job started (a restart learns again: at most ~10
minutes at a 30 s trigger), and only in a batch of at least :data:`MIN_ROWS` of its table's rows (a
batch of 10 rows with one bad one is no surge); a usual share is at least :data:`FLOOR` (a rule no
row ever broke, then broken by one row in 10,000, is a surge; by one in a million, not).

Memory: one float a (table, rule) the job has seen, at most 100 tables x 32 rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.ledger import CommitRecord

WINDOW = 120  # batches: an hour at a 30 s trigger
WARM = 20
MIN_ROWS = 1000
FLOOR = 1e-4


@dataclass
class RuleBaseline:
    """Each (table, rule)'s usual share of broken rows, and how many batches of its table were seen."""

    usual: dict[tuple[str, str], float] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)

    def surge(self, record: CommitRecord) -> float:
        """The batch's highest ratio of a rule's share of its table's rows to its usual share (0.0
        when none can be compared yet), then the usual shares updated with the batch."""
        highest = 0.0
        for share in record.tables:
            rows = share.stats.records_in
            if rows < MIN_ROWS:
                continue
            table = share.table
            seen = self.batches.get(table, 0)
            broken = {(table, rule): n / rows for rule, n in share.stats.rule_violations.items()}
            for key in {*broken, *(k for k in self.usual if k[0] == table)}:
                now, usual = broken.get(key, 0.0), self.usual.get(key, 0.0)
                if seen >= WARM:
                    highest = max(highest, now / max(usual, FLOOR))
                self.usual[key] = usual + (now - usual) / min(seen + 1, WINDOW)
            self.batches[table] = seen + 1
        return highest
