"""A Spark Python worker acknowledges each task's header when it reads it (glue_processor.workers).

The executor writes a task to its worker in two flushes on loopback TCP; with Nagle's algorithm on
its side and a delayed ACK on the worker's, the second waited 40 ms (Linux's delayed-ACK minimum)
for every task. ``TCP_QUICKACK`` (Linux, tcp(7)) makes the worker's kernel acknowledge what the worker
reads at once; the kernel leaves that mode by itself, so it is set before each read.
"""

from __future__ import annotations

import io
import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from glue_processor import workers
from glue_processor.batch import ManifestBatchJob

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected loopback TCP pair, as the executor and its Python worker have."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
    yield sender, receiver
    sender.close()
    receiver.close()


def _quickack(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)


def test_a_socket_stream_is_put_in_quick_ack_mode(pair: tuple[socket.socket, socket.socket]) -> None:
    _, receiver = pair
    receiver.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)  # interactive: ACKs delayed
    assert _quickack(receiver) == 0 and receiver.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
    with os.fdopen(os.dup(receiver.fileno()), "rb", 65536) as stream:  # as PySpark's worker opens it
        workers.quick_ack(stream)
        assert _quickack(receiver) == 1
        assert receiver.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1  # its replies not held
        assert not stream.closed  # its descriptor is still the stream's


def test_streams_on_no_socket_are_left_alone(tmp_path: Any) -> None:
    buffer = io.BytesIO(b"\0\0\0\1")
    workers.quick_ack(buffer)  # no descriptor
    assert buffer.read() == b"\0\0\0\1"
    workers.quick_ack(object())  # not even a stream: nothing raised into PySpark's worker
    r, w = os.pipe()
    with os.fdopen(r, "rb") as pipe, os.fdopen(w, "wb") as out:
        workers.quick_ack(pipe)  # a descriptor, not a socket
        out.write(b"x")
        out.flush()
        assert os.get_blocking(r) and pipe.read(1) == b"x"  # still open, still blocking
    with (tmp_path / "f").open("wb") as f:
        workers.quick_ack(f)
        assert os.fstat(f.fileno()).st_size == 0 and not f.closed


def test_a_default_socket_timeout_leaves_the_worker_blocking(pair: tuple[socket.socket, socket.socket]) -> None:
    """A default timeout (any library in the worker may set one) given to the socket object made to
    set the options would make the descriptor non-blocking, and PySpark's next read would end the
    task with EOFError."""
    sender, receiver = pair
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(5)
    try:
        with os.fdopen(os.dup(receiver.fileno()), "rb", 65536) as stream:
            workers.quick_ack(stream)
            assert os.get_blocking(stream.fileno()) and os.get_blocking(receiver.fileno())
            sender.sendall(struct.pack(">i", 9))
            assert struct.unpack(">i", stream.read(4)) == (9,)
    finally:
        socket.setdefaulttimeout(before)


@pytest.fixture
def set_up() -> Iterator[Any]:
    """The worker set-up in this process, undone afterwards (the suite's driver is no worker)."""
    import pyspark.worker

    read_int = pyspark.worker.read_int  # type: ignore[attr-defined]
    workers._ack_at_once()
    yield pyspark.worker
    pyspark.worker.read_int = read_int  # type: ignore[attr-defined]
    workers._read_int = None


def test_each_int_the_worker_reads_is_read_in_quick_ack_mode(
    pair: tuple[socket.socket, socket.socket], set_up: Any
) -> None:
    sender, receiver = pair
    modes: list[int] = []
    original = workers._read_int

    def spy(stream: Any) -> int:
        modes.append(_quickack(receiver))
        return int(original(stream))

    workers._read_int = spy
    sender.sendall(struct.pack(">ii", 7, -3))
    with os.fdopen(os.dup(receiver.fileno()), "rb", 65536) as stream:
        for expected in (7, -3):
            receiver.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)  # as after the last reply
            assert set_up.read_int(stream) == expected  # PySpark's worker calls it by this name
    assert modes == [1, 1]
    assert set_up.read_int(io.BytesIO(struct.pack(">i", 5))) == 5  # a buffer: read as before


def _read_int_in_worker(_: Any) -> str:
    import pyspark.worker

    return str(pyspark.worker.read_int.__name__)  # type: ignore[attr-defined]


def test_the_batch_tasks_run_in_workers_that_ack_at_once(spark: Any) -> None:
    """Every Spark job of a batch goes through ``ManifestBatchJob._spark_map``: its tasks run in
    workers whose read_int is the quick-ACK one (the driver's is left alone)."""
    from types import SimpleNamespace

    names = ManifestBatchJob._spark_map(SimpleNamespace(spark=spark), _read_int_in_worker, [1, 2])  # type: ignore[arg-type]
    assert names == ["_quick_ack"] * 2
    assert _read_int_in_worker(None) == "read_int"
