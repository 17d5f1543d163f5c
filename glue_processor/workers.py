"""What every Spark Python worker sets up once, before the job's task functions run in it.

PySpark 3.5 (Glue 5) calls ``importlib.invalidate_caches()`` in its worker before every task. On
Python 3.10 and 3.11 a zip importer's ``invalidate_caches`` re-reads its archive's whole directory
right there (python/cpython#103200; made lazy in 3.12 only), and PySpark's own modules come from
``pyspark.zip``, with an importer per package imported from it. Measured on this machine: ~80 ms of
CPU per task (13 importers of ``pyspark.zip``), against ~200 ms for a merge task of 75 partition
files, and the same again for the job's own zip on Glue. Spark calls it only when a task brings new
files from 4.x on (SPARK-54744).

Here a zip importer re-reads its archive only when the archive changed (its inode, size,
modification or change time), the one case where a re-read could find anything new.

And each task waited 40 ms for its own input. The executor sends a task to its Python worker over
loopback TCP in two writes: a header it flushes (task context, files, broadcasts), then the command
and the data. Nagle's algorithm holds the second until the first is acknowledged, and the worker's
kernel delays that ACK (Linux's delayed-ACK minimum, 40 ms) because the exchange looks interactive:
the worker answered the task before. strace of a reused worker, each task: ``read`` of 301 bytes,
then ``read`` of the rest after 38-46 ms. Spark sets no TCP_NODELAY on this socket (it did for
another Python socket, SPARK-51667, for the same reason). Here the worker puts its socket in quick-ACK
mode before each int it reads, the task's header first (``TCP_QUICKACK``, Linux; the kernel leaves the
mode by itself, so before each read; a few µs each, tens a task): the header is acknowledged when
read, and the rest follows at once. An empty one-task Python job, warm: 68 -> 29 ms. Its own writes
(the results) go without Nagle's algorithm (``TCP_NODELAY``), for the same stall the other way.

Each task function is wrapped with :func:`task`, so the first task a worker runs sets this up for
every later one.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import zipimport
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# the archive's (inode, size, mtime, ctime) when this importer last read it
_STAMP = "_ingest_archive_stamp"
_original: Any = None
_read_int: Any = None  # PySpark's worker's read_int, before :func:`_quick_ack`
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only


def task(fn: Callable[[T], R]) -> Callable[[T], R]:
    """``fn`` as a Spark task function: the worker is set up before it runs (picklable: ``fn`` and
    a module function)."""
    return functools.partial(_run, fn)


def _run(fn: Callable[[T], R], item: T) -> R:
    setup()
    return fn(item)


def setup() -> None:
    """Once per process: zip importers re-read their archive only when it changed; the worker's
    socket acknowledges each task's header when it reads it."""
    _ack_at_once()
    global _original  # noqa: PLW0603 - once per process, by design
    if _original is not None or sys.version_info >= (3, 12):
        return
    _original = zipimport.zipimporter.invalidate_caches
    zipimport.zipimporter.invalidate_caches = _invalidate_if_changed  # type: ignore[method-assign]


def _ack_at_once() -> None:
    """PySpark's worker reads each int of a task's input with ``pyspark.worker.read_int`` (a global
    it looks up at each call), the first one while it waits for the next task: from now on each
    read puts the socket in quick-ACK mode first. This covers the daemon's workers (Spark's default,
    which serve task after task); a worker started without the daemon runs ``pyspark.worker`` as
    ``__main__`` and serves one task, whose wait this does not remove."""
    global _read_int  # noqa: PLW0603 - once per process, by design
    if _read_int is not None or _QUICKACK is None:
        return
    try:
        import pyspark.worker as spark_worker
    except ImportError:  # not in a Spark worker's environment: nothing to set up
        return
    _read_int = getattr(spark_worker, "read_int")  # noqa: B009 - not in the module's stubs
    setattr(spark_worker, "read_int", _quick_ack)  # noqa: B010


def _quick_ack(stream: Any) -> int:
    quick_ack(stream)
    return int(_read_int(stream))


def quick_ack(stream: Any) -> None:
    """Put the socket under ``stream`` in quick-ACK mode (what it receives is acknowledged when read,
    not up to 40 ms later), and without Nagle's algorithm (the worker writes its results through a
    64 KiB buffer: a last partial segment is sent at once, not after the executor's ACK of the
    ones before, which its kernel may delay the same way); a stream on no socket is left as it is."""
    if _QUICKACK is None:
        return
    try:
        # SOCK_NONBLOCK: the object takes no default timeout, which would make the descriptor, and
        # with it the worker's streams, non-blocking (the family only names the object: IPv6 works too)
        kind = socket.SOCK_STREAM | socket.SOCK_NONBLOCK
        sock = socket.socket(socket.AF_INET, kind, 0, fileno=stream.fileno())
    except (OSError, ValueError, AttributeError, TypeError):  # no descriptor (a buffer), or not a socket
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:  # a pipe or a file: no TCP to tune
        pass
    finally:
        sock.detach()  # the descriptor stays the stream's


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
