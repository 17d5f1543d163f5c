"""The running query's manifests per trigger, from the data bytes they reference (``contracts.intake``).

A query starts with the count the manifests waiting in the listed prefix ask for (their names carry
their data bytes: one listing, no GET). After each batch the backlog probe's listing says whether
the count still fits: when it is off by ``REPLAN_FACTOR`` the batch asks for the query to be started
again between batches with the new count (``glue_processor.main.run_query``), in the same checkpoint
generation: Spark's file source takes the option anew on a restart, and the batch it had planned
but not run (none: the stop is between batches) would be replayed as planned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from contracts.intake import REPLAN_MIN_S, manifests_per_trigger, replanned
from glue_processor.metrics.backlog import list_dir, measure, waiting
from glue_processor.metrics.convert import Backlog
from glue_processor.settings import JobSettings

logger = logging.getLogger(__name__)


class Intake:
    """The count the query runs with, and when to change it."""

    def __init__(self, settings: JobSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = settings.max_bytes_per_trigger
        self.most = settings.max_files_per_trigger
        self.unknown_size = settings.max_manifest_bytes
        self.running = settings.files_per_trigger
        self._clock = clock
        self._since = -REPLAN_MIN_S

    def first(self, manifest_uri: str) -> int:
        """The count to start the query with: from the manifests waiting now (in the order the file
        source takes them), or the job's assumption of full manifests when none wait."""
        sizes = measure(waiting(list_dir(manifest_uri), set(), None), int(time.time() * 1000)).sizes
        return self.start(manifests_per_trigger(self.budget, sizes, most=self.most, unknown_size=self.unknown_size))

    def start(self, count: int) -> int:
        self.running, self._since = count, self._clock()
        logger.info(
            "intake: manifests per trigger",
            extra={"manifests_per_trigger": count, "max_bytes_per_trigger": self.budget},
        )
        return count

    def replan(self, backlog: Backlog | None) -> int | None:
        """The count to start the query again with, after a batch, or None to keep the running one."""
        if backlog is None or self._clock() - self._since < REPLAN_MIN_S:
            return None
        return replanned(
            self.running, backlog.sizes, budget=self.budget, most=self.most, unknown_size=self.unknown_size
        )
