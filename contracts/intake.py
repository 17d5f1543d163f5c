"""How many manifests a trigger takes: the job's byte budget over the manifests' own data bytes.

Spark 3.5's file source bounds a trigger by a count of files (``maxFilesPerTrigger``; its
``maxBytesPerTrigger`` is Spark 4, SPARK-46641, and would count the manifests' own bytes, not the
data they reference). A manifest references anything from one small object to 1 GiB: at a low
arrival rate each holds one batching window, 100-200 MB, so a count worked out at 1 GiB a manifest
takes a fraction of the budget and of what arrives. So the job counts from the data bytes the
waiting manifests reference (the bytes end each manifest's name, ``contracts.layout``): the oldest
ones, in order, while their bytes fit the budget, and past those, full manifests. The query runs
with that count; the job starts it again, between batches, when the manifests waiting say the count
is off by :data:`REPLAN_FACTOR` or more (:func:`replanned`, ``glue_processor.intake``). The control
plane (its batch bound) and ``make autoscale`` (its model of the job) use the same functions, so
what one plans is what the other takes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import median

# A query is started again with a new count only when the count the waiting manifests ask for is this
# many times the running one, or the running one would take this many budgets: a restart costs a
# second or two, and a count within the band takes between half and twice the budget.
REPLAN_FACTOR = 2.0
# The most budgets a trigger takes when full manifests follow the few small ones its count was
# planned on (a burst after a quiet spell): the count past the listed manifests is bounded by it.
BURST_BUDGETS = 16
# At most one restart of the query for its count within this long.
REPLAN_MIN_S = 60.0


# The job's defaults (``--max_files_per_trigger``, ``--max_manifest_bytes``: the Lambda's bound) and
# the most ``--max_files_per_trigger`` it takes.
JOB_MAX_FILES = 100
JOB_MAX_MANIFEST_BYTES = 1024**3
JOB_FILES_LIMIT = 10_000


def most_manifests(budget: int, max_files: int, max_manifest_bytes: int) -> int:
    """The count bound a run of byte budget ``budget`` needs: ``max_files``, but never so low that
    full manifests (of ``max_manifest_bytes``) could not fill the budget. The control plane starts a
    run with it (``--max_files_per_trigger``) when its budget passes ``max_files`` full manifests;
    the job takes ``--max_files_per_trigger`` as it is given."""
    if budget <= 0:
        return max_files
    return min(JOB_FILES_LIMIT, max(max_files, math.ceil(budget / max_manifest_bytes)))


def manifests_per_trigger(budget: int, waiting: Sequence[int], *, most: int, unknown_size: int) -> int:
    """Manifests a trigger takes so that their data bytes fill ``budget`` (0: no budget, ``most``).

    ``waiting``: the data bytes of the manifests waiting, oldest first (the order the file source
    takes them). The oldest are counted while their sum stays within the budget (the first always:
    a trigger makes progress); when all of them fit, the rest of the budget counts manifests of their
    median size (``unknown_size``, the most one references, when none wait), but never so many that
    full manifests arriving after them (a burst after a quiet spell) would make more than
    :data:`BURST_BUDGETS` budgets: a count is planned on what waits, and Spark takes that many of
    whatever is listed at the next trigger. At least one, at most ``most``."""
    if budget <= 0:
        return most
    count, total = 0, 0
    for size in waiting:
        if count and total + size > budget:
            return max(1, min(most, count))
        count, total = count + 1, total + size
    # past the listed ones: manifests of their median size, and never more than full ones would make
    # BURST_BUDGETS budgets of (a burst of full manifests after a few small ones)
    typical = median(waiting) if waiting else unknown_size
    more = int(max(0, budget - total) // max(1.0, typical))
    burst = int(max(0, BURST_BUDGETS * budget - total) // max(1, unknown_size))
    count += min(more, burst)
    return max(1, min(most, count))


def replanned(running: int, waiting: Sequence[int], *, budget: int, most: int, unknown_size: int) -> int | None:
    """The count to start the query again with, or None to keep ``running``.

    Up only when the intake binds (more manifests wait than a trigger takes) and the waiting ones'
    bytes ask for :data:`REPLAN_FACTOR` times the count or more; down when the next trigger would take
    more than REPLAN_FACTOR times the budget. So a run that keeps up keeps its count whatever the
    size of the few manifests waiting (a count raised on tiny manifests would take a burst of full
    ones whole), and a count never changes within its band."""
    if budget <= 0 or not waiting:
        return None
    wanted = manifests_per_trigger(budget, waiting, most=most, unknown_size=unknown_size)
    if len(waiting) > running and wanted >= running * REPLAN_FACTOR:
        return wanted
    if sum(waiting[:running]) > budget * REPLAN_FACTOR and wanted < running:
        return wanted
    return None
