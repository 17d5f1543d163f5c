"""An object's text, streamed in chunks of whole lines: memory bounded whatever the object's size.

A parse task never holds a whole object: it reads the (decompressed) stream in blocks and hands
the parser chunks of complete lines of about ``chunk_bytes``, each with the number of its first
line, so line numbers stay true across chunks. A line longer than ``max_line_bytes`` is skipped
as it streams by and reported as a :class:`LongLine` (it becomes that line's quarantine record).
Past ``max_object_bytes`` of text the stream stops with :class:`TooLarge`, naming the first line
not read; a stream that breaks (corrupt or truncated gzip) stops with :class:`ReadFailed`, likewise.
"""

from __future__ import annotations

import queue
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from ndjson_arrow import Framer, newlines, sniff_document

from glue_processor.shared.gunzip import Gunzip

MIB = 1024 * 1024
READ_BYTES = 8 * MIB
# UTF-8's byte-order mark: RFC 8259 section 8.1 lets a parser ignore it at the start of a text, and
# many Windows tools write it.
BOM = b"\xef\xbb\xbf"


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
    text: bytes | memoryview  # whole lines (the last may lack its newline at the end of the object)
    first_line: int  # 1-based number of its first line
    # a JSON document's records, a line each: the number of the line the i-th one starts on
    starts: np.ndarray | None = None


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


class DocumentCut(StreamStopped):
    """A JSON document ended inside its array: cut (or its closing bracket is missing). Every record
    before the end was read; the object is not whole."""


def decompressed(stream: BinaryIO, *, gzipped: bool) -> BinaryIO:
    """The text stream of an object: gunzipped as it is read (every gzip member, every byte decoded
    before a break: :mod:`glue_processor.shared.gunzip`) when ``gzipped``."""
    return Gunzip(stream) if gzipped else stream  # type: ignore[return-value]


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


def chunks(
    stream: BinaryIO,
    limits: Limits = Limits(),
    *,
    first_line: int = 1,
    skip_bom: bool = False,
    sniff: bool = False,
) -> Iterator[Chunk | LongLine]:
    """Whole-line chunks of ``stream`` (see the module docstring), numbered from ``first_line``;
    with ``skip_bom``, a byte-order mark that starts the stream is not part of its text; with
    ``sniff`` (the stream is a whole object), a text that is a JSON document rather than NDJSON
    (:func:`is_document`) comes as chunks of its records, a line each (:func:`_records`).

    A chunk is the complete lines of one block read, as a view of the block (no copy), except the
    line that began in an earlier block, which is a chunk of its own (its bytes joined once)."""
    blocks = _Blocks(read_ahead(stream, min(READ_BYTES, limits.chunk_bytes)), limits, skip_bom=skip_bom)
    if sniff:
        head = blocks.peek(first_line, SNIFF_BYTES + len(BOM))
        if head and is_document(head):
            yield from _records(blocks, limits, first_line)
            return
    carry = bytearray()  # the start of a line that began in an earlier block
    line = first_line  # number of the next line to yield (the one in ``carry``, if any)
    skipping: LongLine | None = None  # a long line being skipped: its number and size so far
    while block := blocks.next(line):
        at = 0
        if skipping is not None:
            cut = block.find(b"\n")
            if cut < 0:
                skipping = LongLine(skipping.line, skipping.size + len(block), skipping.head)
                continue
            yield LongLine(skipping.line, skipping.size + cut + 1, skipping.head)
            skipping, line, at = None, line + 1, cut + 1
        view = memoryview(block)
        first = block.find(b"\n", at)
        if first < 0:  # no line ends in this block
            carry += view[at:]
        else:
            if carry:  # the line that began before ends here
                carry += view[at : first + 1]
                yield Chunk(bytes(carry), line)
                carry, line, at = bytearray(), line + 1, first + 1
            last = block.rfind(b"\n", at)
            if last >= at:
                yield Chunk(view[at : last + 1], line)
                line += newlines(block, at, last + 1)
                at = last + 1
            carry += view[at:]
        if len(carry) > limits.max_line_bytes:
            skipping, carry = LongLine(line, len(carry), bytes(carry[:1000])), bytearray()
    if skipping is not None:
        yield skipping
    elif carry:
        yield Chunk(bytes(carry), line)


# How much of an object's start decides whether it is a JSON document rather than NDJSON.
SNIFF_BYTES = 1 * MIB


def is_document(head: bytes | memoryview) -> bool:
    """True when a text that starts with ``head`` is a JSON document rather than NDJSON: its first
    value is an array, or an object that goes on past its first line (pretty-printed), unless the
    next two lines are whole objects standing alone (the first line was cut: NDJSON, where it is one
    bad line, not one record running to the object's end; ``frame_sniff``). Decided on the first
    :data:`SNIFF_BYTES` after a byte-order mark (a first object longer than that on one line is
    NDJSON)."""
    head = bytes(head[: SNIFF_BYTES + len(BOM)])
    return bool(sniff_document(head.removeprefix(BOM)[:SNIFF_BYTES]) == 1)


def _records(blocks: _Blocks, limits: Limits, first_line: int) -> Iterator[Chunk | LongLine]:
    """A JSON document's records as chunks of lines (one record each, ``Chunk.starts`` saying the
    line each starts on), and records over ``max_line_bytes`` as :class:`LongLine` (see
    ``ndjson_arrow/frame_core.h`` for how the records are found)."""
    framer = Framer(limits.max_line_bytes, first_line)
    while True:
        block = blocks.next(framer.line)
        text, starts, longs = framer.feed(block) if block else framer.finish()
        for line, size, head in longs:
            yield LongLine(line, size, head)
        if text:
            yield Chunk(text, 1, starts=np.frombuffer(starts, dtype=np.int64))
        if not block:
            if framer.open_array:
                raise DocumentCut(
                    f"it ends inside the array opened on line {framer.open_array} (cut, or its closing ] is missing)",
                    next_line=framer.line,
                    text_bytes=blocks.total,
                )
            return


class _Blocks:
    """The blocks of an object's text, each read stopping with :class:`ReadFailed` or
    :class:`TooLarge` (naming the line it stopped at); a byte-order mark at its start dropped when
    asked."""

    def __init__(self, blocks: Iterator[bytes], limits: Limits, *, skip_bom: bool) -> None:
        self._blocks = _without_bom(blocks) if skip_bom else blocks
        self._limits = limits
        self._peeked: list[bytes] = []
        self._stopped: StreamStopped | None = None  # a read that stopped while peeking ahead
        self.total = 0

    def peek(self, line: int, at_least: int = 1) -> bytes:
        """The text of the next blocks, at least ``at_least`` bytes of it unless the text ends
        first (the sniff decides on its first MiB, whatever the block size), which :meth:`next`
        returns again. A read past the first block that stops is raised by :meth:`next` once the
        blocks before it are handed out, naming the line it stopped at."""
        if not self._peeked and self._stopped is None:
            self._peeked.append(self._read(line))
        have = sum(len(b) for b in self._peeked)
        while have < at_least and self._peeked and self._peeked[-1] and self._stopped is None:
            try:
                block = self._read(line)
            except StreamStopped as exc:
                self._stopped = exc
                break
            self._peeked.append(block)
            have += len(block)
        return self._peeked[0] if len(self._peeked) == 1 else b"".join(self._peeked)

    def next(self, line: int) -> bytes:
        """The next block (``b""`` at the end); ``line``: the number of the first line not read yet."""
        if self._peeked:
            return self._peeked.pop(0)
        if self._stopped is not None:
            stopped, self._stopped = self._stopped, None
            raise type(stopped)(str(stopped), next_line=line, text_bytes=stopped.text_bytes) from stopped.__cause__
        return self._read(line)

    def _read(self, line: int) -> bytes:
        try:
            block = next(self._blocks, b"")
        except (OSError, EOFError, zlib.error) as exc:
            raise ReadFailed(f"{type(exc).__name__}: {exc}", next_line=line, text_bytes=self.total) from exc
        self.total += len(block)
        if self.total > self._limits.max_object_bytes:
            limit = self._limits.max_object_bytes // MIB
            raise TooLarge(f"more than {limit} MiB of text", next_line=line, text_bytes=self.total)
        return block


def _without_bom(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """The blocks, less a byte-order mark at the very start (however the first blocks are cut)."""
    head = b""
    for block in blocks:
        joined = head + block if head else block
        if len(joined) < len(BOM) and BOM.startswith(joined):
            head = joined
            continue
        yield joined[len(BOM) :] if joined.startswith(BOM) else joined
        yield from blocks
        return
    if head and head != BOM:
        yield head


# -- byte ranges of one object ---------------------------------------------------------------
# A large plain object is read by several tasks, a byte range [start, end) each. A range owns the
# lines that *start* in it (a line starts at byte 0 or after a newline, and a newline at the very
# end starts nothing), so every line belongs to exactly one range whatever the cut points.


def line_starts(stream: BinaryIO, *, start: int, end: int) -> int:
    """How many lines start in [start, end), from ``stream`` positioned at ``read_from(start)``
    (the object's size is ``end`` for the last range)."""
    first = read_from(start)
    remaining = max(0, end - 1 - first)  # newlines at [first, end - 1): each starts the next line
    count = 1 if start == 0 else 0
    buffer = bytearray(min(READ_BYTES, remaining))
    view = memoryview(buffer)
    while remaining > 0:
        n = _read_into(stream, view[: min(len(buffer), remaining)])
        if not n:
            break
        count += newlines(buffer, 0, n)
        remaining -= n
    return count


def _read_into(stream: BinaryIO, view: memoryview) -> int:
    """Fill ``view`` from ``stream`` as far as it goes (one reused buffer, no new bytes per read)."""
    if hasattr(stream, "readinto"):
        return int(stream.readinto(view))
    block = stream.read(len(view))  # botocore's streams have no readinto
    view[: len(block)] = block
    return len(block)


def read_from(start: int) -> int:
    """Where a range's reader starts: one byte early, to see whether a line starts at ``start``."""
    return max(0, start - 1)


class OwnedLines:
    """The bytes of the lines that start in [start, end) (``end`` None: to the end of the object),
    from ``stream`` positioned at ``read_from(start)``: the line cut by ``start`` is skipped, the
    one cut by ``end`` is read to its newline (or the end of the object)."""

    def __init__(self, stream: BinaryIO, *, start: int, end: int | None) -> None:
        self._stream = stream
        self._pos = read_from(start)  # object position of the next byte of ``stream``
        self._end = end if end is not None else 1 << 62
        self._skipping = start > 0  # before the first line that starts in the range
        self._tail = False  # past ``end``: only the rest of the last line, to its newline
        self._last = -1  # the last byte returned before ``end``
        self._done = False

    def read(self, size: int = -1) -> bytes:
        while not self._done:
            block = self._stream.read(READ_BYTES if size < 0 else max(size, 1))
            if not block:
                self._done = True
                break
            at = self._pos
            self._pos += len(block)
            if self._skipping:
                # a newline at or past end - 1 starts no line of ours: not worth reading to
                cut = block.find(b"\n", 0, max(0, self._end - 1 - at))
                if cut < 0:
                    if at + len(block) >= self._end - 1:
                        self._done = True
                        break
                    continue
                self._skipping, self._last = False, ord("\n")
                block, at = block[cut + 1 :], at + cut + 1
                if at >= self._end:  # no line starts in the range
                    self._done = True
                    break
            if self._tail:
                return self._to_newline(block, b"")
            if at + len(block) <= self._end:
                if not block:
                    continue
                self._last = block[-1]
                return block
            head = block[: max(0, self._end - at)]
            if head:
                self._last = head[-1]
            if self._last == ord("\n"):  # the next line starts at ``end``: not ours
                self._done = True
                return head
            self._tail = True
            return self._to_newline(block[len(head) :], head)
        return b""

    def _to_newline(self, block: bytes, head: bytes) -> bytes:
        cut = block.find(b"\n")
        if cut < 0:
            return head + block
        self._done = True
        return head + block[: cut + 1]
