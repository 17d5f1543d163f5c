"""Fail points for fault-injection tests: kill the whole process tree at a named moment.

``INGEST_FAULT=<point>:<probability>[,<point>:<probability>...]`` arms them (``make reliability``
does); unset, ``hit`` is a dictionary lookup that does nothing. Points: ``after-read``,
``after-stage`` (Parquet staged, not committed), ``after-commit-record`` (committed, not published),
``mid-publish``, ``before-key-index`` (published; the mirrored keys' states not yet written: see
docs/mirror.md), ``after-batch`` (published; Spark's checkpoint commit not yet written).

``INGEST_PAUSE=<point>:<seconds>`` makes the first hit of a point sleep instead (a slow run, for
races between two runs), touching ``INGEST_PAUSE_MARKER`` when it starts sleeping, if set; with
``INGEST_PAUSE_UNTIL`` set, the sleep ends as soon as that file exists (a test's other run is done,
however long it took on a loaded machine).

``INGEST_TWO_RUNS=1`` lifts the local one-run-per-WORKDIR lock, so a test can start two runs of the
job on one checkpoint, as two Glue runs can (no local lock stands between them there).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

# Read once at import: test instrumentation, not configuration.
_ARMED: dict[str, float] = {}
for _item in filter(None, os.environ.get("INGEST_FAULT", "").split(",")):
    _name, _, _p = _item.partition(":")
    _ARMED[_name.strip()] = float(_p or 1.0)


_PAUSE: dict[str, float] = {}
for _item in filter(None, os.environ.get("INGEST_PAUSE", "").split(",")):
    _name, _, _s = _item.partition(":")
    _PAUSE[_name.strip()] = float(_s or 1.0)


TWO_RUNS = os.environ.get("INGEST_TWO_RUNS") == "1"


def hit(point: str) -> None:
    """SIGKILL this process group (Python driver and JVM) if ``point`` is armed and the dice say so."""
    seconds = _PAUSE.pop(point, None)
    if seconds is not None:
        marker = os.environ.get("INGEST_PAUSE_MARKER")
        if marker:
            Path(marker).touch()
        until = os.environ.get("INGEST_PAUSE_UNTIL")
        if until:
            deadline = time.monotonic() + seconds
            while not Path(until).exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        else:
            time.sleep(seconds)
    probability = _ARMED.get(point)
    if probability is not None and random.random() < probability:  # noqa: S311 - not cryptography
        os.killpg(os.getpgrp(), signal.SIGKILL)
