"""A parse task's rows checked against their table's rules (:mod:`glue_processor.shared.rules`).

Rows come here typed (declared types applied first) with their lineage; what leaves is the rows the
table keeps, the rows to quarantine with the rules each broke, and the counts: per rule every row
that broke it, whatever the other rules did; rows dropped. Vectorised: a quarantined row is an index
and a code (which quarantine rules it broke, and which of them because of a NULL), so a batch whose
every row breaks a rule costs a few array passes, and each distinct code's reason is worded once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from glue_processor.shared.names import LINEAGE_TYPES, decoded
from glue_processor.shared.rules import Rules, Verdict


@dataclass
class Checked:
    checked: pa.Table  # the rows as they came
    kept: pa.Table
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # the rows quarantined
    codes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # each one's, see below
    # the quarantine rules some row broke: bit 2i of a code says the row broke the i-th, bit 2i+1
    # that it did because the rule was NULL
    verdicts: list[Verdict] = field(default_factory=list)
    dropped: int = 0
    violations: dict[str, int] = field(default_factory=dict)  # rule -> rows that broke it

    @property
    def removed(self) -> int:
        """Rows not kept: quarantined or dropped."""
        return len(self.rows) + self.dropped

    def broken(self) -> Iterator[tuple[int, str, str]]:
        """(code, the first rule broken, why each was) for each distinct code of the rows quarantined."""
        for code in np.unique(self.codes).tolist():
            row = int(self.rows[int(np.argmax(self.codes == code))])
            which = [v for i, v in enumerate(self.verdicts) if code >> (2 * i) & 1]
            yield code, which[0].rule.name, "; ".join(v.reason(row) for v in which)


def check(table: pa.Table, rules: Rules, *, data_prefix: str) -> Checked:
    """``table``'s rows against ``rules``: data columns are named ``data_prefix + key``, lineage
    columns by their own names. A row breaking a quarantine rule is quarantined, else one breaking a
    drop rule is dropped (quarantined if the rule could not be evaluated); a warn rule only counts."""
    rows = len(table)
    present = set(table.column_names)

    def column(name: str) -> pa.ChunkedArray | None:
        wanted = name if name in LINEAGE_TYPES else data_prefix + name
        return decoded(table.column(wanted)) if wanted in present else None

    verdicts = rules.evaluate(column, rows)  # the rules some row broke
    if not verdicts:
        return Checked(table, table)
    violations = {v.rule.name: int(v.failed.sum()) for v in verdicts}
    # rows a rule could not be evaluated on (an overflow, a bigint's / 0) leave the table only for the
    # quarantine table, where they can be loaded again: a drop rule's too, never dropped
    quarantine = [(v, _quarantining(v)) for v in verdicts]
    quarantine = [(v, mask) for v, mask in quarantine if mask.any()]
    codes = np.zeros(rows, dtype=np.int64)
    for i, (v, mask) in enumerate(quarantine):
        codes |= mask.astype(np.int64) << (2 * i) | (mask & v.null).astype(np.int64) << (2 * i + 1)
    to_quarantine = codes != 0
    to_drop = np.zeros(rows, dtype=bool)
    for v in verdicts:
        if v.rule.on_fail == "drop":
            to_drop |= v.failed if v.errored is None else v.failed & ~v.errored
    to_drop &= ~to_quarantine
    removed = to_quarantine | to_drop
    kept = table.filter(pa.array(~removed)) if removed.any() else table
    quarantined = np.flatnonzero(to_quarantine)
    return Checked(
        table, kept, quarantined, codes[quarantined], [v for v, _ in quarantine], int(to_drop.sum()), violations
    )


def _quarantining(v: Verdict) -> np.ndarray:
    """The rows a verdict sends to the quarantine table: a quarantine rule's broken rows, and a drop
    rule's rows it could not be evaluated on (a warn rule's stay in the table, counted: warn never
    takes a row out)."""
    if v.rule.on_fail == "quarantine":
        return v.failed
    if v.rule.on_fail == "drop" and v.errored is not None:
        return v.errored
    return np.zeros(len(v.failed), dtype=bool)
