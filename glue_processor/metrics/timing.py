"""A batch's wall time by name, and the names: its driver steps here, its stages in the commit
record (:class:`contracts.ledger.Stage`). The job times them; the benches read them by these names."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Final


class Step:
    """The driver's steps of a batch (``ManifestBatchJob.steps``), kept in memory for the benches."""

    TOTAL: Final = "total"  # the whole foreachBatch call
    COLLECT: Final = "collect"
    PREPARE: Final = "prepare"
    PLAN: Final = "plan"
    COMMIT_RECORD: Final = "commit_record"
    PUBLISH: Final = "publish"
    REPORT: Final = "report"
    # the steps within TOTAL, in the order the batch takes them
    IN_ORDER: Final = (COLLECT, PREPARE, PLAN, COMMIT_RECORD, PUBLISH, REPORT)


class Stopwatch:
    """Wall seconds per name, summed over the name's uses (``with watch(name): ...``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - t0, 3)
