"""A parse task's rows checked against their table's rules (:mod:`glue_processor.table.rules`).

Rows come here typed (declared types applied first) with their lineage; what leaves is the rows the
table keeps, the rows to quarantine with the rules each broke, and the counts: per rule every row
that broke it, whatever the other rules did; rows dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from glue_processor.table.rules import LINEAGE_TYPES, Rules, Verdict


@dataclass
class Checked:
    checked: pa.Table  # the rows as they came
    kept: pa.Table
    # the rows to quarantine (their index in the rows checked) and the quarantine rules each broke
    quarantined: list[tuple[int, list[Verdict]]] = field(default_factory=list)
    dropped: int = 0
    violations: dict[str, int] = field(default_factory=dict)  # rule -> rows that broke it

    @property
    def removed(self) -> int:
        """Rows not kept: quarantined or dropped."""
        return len(self.quarantined) + self.dropped


def check(table: pa.Table, rules: Rules, *, data_prefix: str) -> Checked:
    """``table``'s rows against ``rules``: data columns are named ``data_prefix + key``, lineage
    columns by their own names. A row breaking a quarantine rule is quarantined, else one breaking a
    drop rule is dropped; a warn rule only counts."""
    rows = len(table)
    present = set(table.column_names)

    def column(name: str) -> pa.ChunkedArray | None:
        wanted = name if name in LINEAGE_TYPES else data_prefix + name
        return table.column(wanted) if wanted in present else None

    verdicts = rules.evaluate(column, rows)
    violations = {v.rule.name: int(v.failed.sum()) for v in verdicts if v.failed.any()}
    if not violations:
        return Checked(table, table)
    quarantine = [v for v in verdicts if v.rule.on_fail == "quarantine" and v.failed.any()]
    drop = [v for v in verdicts if v.rule.on_fail == "drop" and v.failed.any()]
    to_quarantine = np.zeros(rows, dtype=bool)
    for v in quarantine:
        to_quarantine |= v.failed
    to_drop = np.zeros(rows, dtype=bool)
    for v in drop:
        to_drop |= v.failed
    to_drop &= ~to_quarantine
    quarantined = [(int(row), [v for v in quarantine if v.failed[row]]) for row in np.flatnonzero(to_quarantine)]
    removed = to_quarantine | to_drop
    kept = table.filter(pa.array(~removed)) if removed.any() else table
    return Checked(table, kept, quarantined, int(to_drop.sum()), violations)
