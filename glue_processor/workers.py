"""What every Spark Python worker sets up once, before the job's task functions run in it.

PySpark 3.5 (Glue 5) calls ``importlib.invalidate_caches()`` in its worker before every task. On
Python 3.10 and 3.11 a zip importer's ``invalidate_caches`` re-reads its archive's whole directory
right there (python/cpython#103200; made lazy in 3.12 only), and PySpark's own modules come from
``pyspark.zip``, with an importer per package imported from it. Measured on this machine: ~80 ms of
CPU per task (13 importers of ``pyspark.zip``), against ~200 ms for a merge task of 75 partition
files, and the same again for the job's own zip on Glue. Spark calls it only when a task brings new
files from 4.x on (SPARK-54744).

Here a zip importer re-reads its archive only when the archive changed (its inode, size,
modification or change time), the one case where a re-read could find anything new. Each task
function is wrapped with :func:`task`, so the first task a worker runs sets this up for every later
one.
"""

from __future__ import annotations

import functools
import os
import sys
import zipimport
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# the archive's (inode, size, mtime, ctime) when this importer last read it
_STAMP = "_ingest_archive_stamp"
_original: Any = None


def task(fn: Callable[[T], R]) -> Callable[[T], R]:
    """``fn`` as a Spark task function: the worker is set up before it runs (picklable: ``fn`` and
    a module function)."""
    return functools.partial(_run, fn)


def _run(fn: Callable[[T], R], item: T) -> R:
    setup()
    return fn(item)


def setup() -> None:
    """Once per process: zip importers re-read their archive only when it changed."""
    global _original  # noqa: PLW0603 - once per process, by design
    if _original is not None or sys.version_info >= (3, 12):
        return
    _original = zipimport.zipimporter.invalidate_caches
    zipimport.zipimporter.invalidate_caches = _invalidate_if_changed  # type: ignore[method-assign]


def _invalidate_if_changed(self: zipimport.zipimporter) -> None:
    try:
        st = os.stat(self.archive)
        # a file put in its place (a new inode) or rewritten (ctime moves even when mtime is kept)
        stamp: tuple[int, ...] | None = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except OSError:
        stamp = None  # gone: the original empties the importer
    if stamp is not None and getattr(self, _STAMP, None) == stamp:
        return
    _original(self)
    setattr(self, _STAMP, stamp)
