"""An object's text, streamed in chunks of whole lines: memory bounded whatever the object's size.

A parse task never holds a whole object: it reads the (decompressed) stream in blocks and hands
the parser chunks of complete lines of about ``chunk_bytes``, each with the number of its first
line, so line numbers stay true across chunks. A line longer than ``max_line_bytes`` is skipped
as it streams by and reported as a :class:`LongLine` (it becomes that line's quarantine record).
Past ``max_object_bytes`` of text the stream stops with :class:`TooLarge`, naming the first line
not read; a stream that breaks (corrupt or truncated gzip) stops with :class:`ReadFailed`, likewise.
"""

from __future__ import annotations

import gzip
import queue
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

MIB = 1024 * 1024
READ_BYTES = 8 * MIB


@dataclass(frozen=True)
class Limits:
    # A parsed chunk is dense: every column has an offset per row, so a chunk costs rows x columns
    # x 4 bytes besides its text (8 MiB of 100-byte rows at the 1,000-column bound: 335 MB). The
    # native parser has no per-call cost to amortise, so chunks stay small.
    chunk_bytes: int = 8 * MIB
    max_line_bytes: int = 256 * MIB
    max_object_bytes: int = 20 * 1024 * MIB


@dataclass(frozen=True)
class Chunk:
    text: bytes  # whole lines (the last may lack its newline at the end of the object)
    first_line: int  # 1-based number of its first line


@dataclass(frozen=True)
class LongLine:
    line: int
    size: int
    head: bytes  # its first bytes, for the quarantine record


class StreamStopped(Exception):
    """Reading stopped before the end of the object; lines from ``next_line`` on were not read."""

    def __init__(self, message: str, *, next_line: int, text_bytes: int) -> None:
        super().__init__(message)
        self.next_line = next_line
        self.text_bytes = text_bytes


class TooLarge(StreamStopped):
    """The object's text is over ``max_object_bytes``."""


class ReadFailed(StreamStopped):
    """The stream broke (corrupt or truncated gzip, or the connection)."""


def decompressed(stream: BinaryIO, *, gzipped: bool) -> BinaryIO:
    """The text stream of an object: gunzipped as it is read (every gzip member) when ``gzipped``."""
    return gzip.GzipFile(fileobj=stream, mode="rb") if gzipped else stream  # type: ignore[return-value]


def read_ahead(stream: BinaryIO, size: int, *, depth: int = 2) -> Iterator[bytes]:
    """The stream's blocks, read by a thread while the caller parses the previous ones (reading
    from S3 and gunzipping release the GIL), at most ``depth`` blocks ahead. An error of the read
    is raised where the block it stopped would have been."""
    blocks: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def pump() -> None:
        try:
            while not stop.is_set():
                block = stream.read(size)
                blocks.put(block if block else None)
                if not block:
                    return
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it in its thread
            blocks.put(exc)

    reader = threading.Thread(target=pump, name="read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            item = blocks.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while reader.is_alive():  # unblock a pump waiting on a full queue, then let it end
            try:
                blocks.get_nowait()
            except queue.Empty:
                reader.join(timeout=0.05)


def chunks(stream: BinaryIO, limits: Limits = Limits()) -> Iterator[Chunk | LongLine]:
    """Whole-line chunks of ``stream`` (see the module docstring)."""
    buffer = bytearray()
    line = 1  # number of the first line in ``buffer``
    total = 0
    skipping: LongLine | None = None  # a long line being skipped: its number and size so far
    blocks = read_ahead(stream, min(READ_BYTES, limits.chunk_bytes))
    while True:
        try:
            block = next(blocks, b"")
        except (OSError, EOFError, zlib.error) as exc:
            raise ReadFailed(f"{type(exc).__name__}: {exc}", next_line=line, text_bytes=total) from exc
        if not block:
            break
        total += len(block)
        if total > limits.max_object_bytes:
            raise TooLarge(f"more than {limits.max_object_bytes // MIB} MiB of text", next_line=line, text_bytes=total)
        if skipping is not None:
            cut = block.find(b"\n")
            if cut < 0:
                skipping = LongLine(skipping.line, skipping.size + len(block), skipping.head)
                continue
            yield LongLine(skipping.line, skipping.size + cut + 1, skipping.head)
            skipping = None
            line += 1
            block = block[cut + 1 :]
        buffer += block
        if len(buffer) < limits.chunk_bytes:
            if b"\n" not in buffer and len(buffer) > limits.max_line_bytes:
                skipping, buffer = LongLine(line, len(buffer), bytes(buffer[:1000])), bytearray()
            continue
        cut = buffer.rfind(b"\n")
        if cut < 0:
            if len(buffer) > limits.max_line_bytes:
                skipping, buffer = LongLine(line, len(buffer), bytes(buffer[:1000])), bytearray()
            continue
        text = bytes(buffer[: cut + 1])
        del buffer[: cut + 1]
        yield Chunk(text, line)
        line += text.count(b"\n")
        if b"\n" not in buffer and len(buffer) > limits.max_line_bytes:
            skipping, buffer = LongLine(line, len(buffer), bytes(buffer[:1000])), bytearray()
    if skipping is not None:
        yield skipping
    elif buffer:
        yield Chunk(bytes(buffer), line)
