"""A gzip object's text as it is read: every byte decoded before a break is handed out first.

``gzip.GzipFile.read(n)`` raises when the stream breaks inside the ``n`` bytes asked for, and the
bytes it had decoded in that call are gone: a truncated object lost up to a whole block of good
lines (8 MiB here), and an object of one member followed by a few bytes that are not gzip lost all
of them, although ``gunzip`` recovers the member. Here each :meth:`Gunzip.read` returns what was
decoded up to the break, and the next one raises it, so the parse task loads every line before the
break and its quarantine record names the first line that was not read.

The members of an object are decoded one after the other (RFC 1952 section 2.2: a gzip file is a
series of members); zero bytes between or after members are padding (as ``gzip`` and ``gunzip``
take them). zlib checks each member's CRC-32 and length. A read returns at most the bytes asked for,
whatever the compression ratio: memory follows the block, not the object.
"""

from __future__ import annotations

import zlib
from typing import BinaryIO

MAGIC = b"\x1f\x8b"
# compressed bytes read from the object at a time
INPUT_BYTES = 1024 * 1024
# zlib's window bits for a gzip header and trailer (zlib.decompressobj's documentation)
GZIP_WBITS = 16 + zlib.MAX_WBITS


class NotGzip(OSError):
    """Bytes where a gzip member should start are something else."""


class Truncated(EOFError):
    """The object ends inside a gzip member."""


class Gunzip:
    """The decoded text of the gzip ``raw`` stream, read in blocks (``read(size)``)."""

    def __init__(self, raw: BinaryIO, *, input_bytes: int = INPUT_BYTES) -> None:
        self._raw = raw
        self._input_bytes = input_bytes
        self._member: zlib._Decompress | None = None  # the member being decoded
        self._pending = b""  # compressed bytes read and not yet given to a member
        self._raw_done = False
        self._broken: BaseException | None = None
        self._done = False
        self.members = 0  # members started so far

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes of text (``b""`` at the end). A break in the stream is raised by the
        first read that has nothing decoded before it."""
        limit = size if size > 0 else 64 * 1024 * 1024
        out: list[bytes] = []
        got = 0
        while got < limit and not self._done and self._broken is None:
            try:
                piece = self._decode(limit - got)
            except (zlib.error, OSError, EOFError) as exc:
                self._broken = exc
                break
            if piece:
                out.append(piece)
                got += len(piece)
        if not out and self._broken is not None:
            raise self._broken
        return b"".join(out)

    def close(self) -> None:
        self._done = True

    def _decode(self, limit: int) -> bytes:
        """Some decoded bytes (at most ``limit``), possibly none while a member starts or ends."""
        if self._member is None:
            if not self._start():
                self._done = True
            return b""
        member = self._member
        data = member.unconsumed_tail or self._take()  # nothing left to read: b"" flushes the member
        text = member.decompress(data, limit)
        if member.eof:  # the member's CRC-32 and length matched: what follows is the next one
            self._pending, self._member = member.unused_data, None
        elif not data and not text:
            raise Truncated(f"the object ends inside gzip member {self.members} (truncated)")
        return text

    def _start(self) -> bool:
        """Start the next member; False at the end of the object (only padding left)."""
        while True:
            self._pending = self._pending.lstrip(b"\x00")
            if len(self._pending) >= len(MAGIC) or self._raw_done:
                break
            self._pending += self._read_raw()
        if not self._pending:
            return False
        if not self._pending.startswith(MAGIC):
            where = "the object's first bytes" if not self.members else f"bytes after gzip member {self.members}"
            raise NotGzip(f"{where} are not gzip ({self._pending[:8]!r})")
        self._member = zlib.decompressobj(GZIP_WBITS)
        self.members += 1
        return True

    def _take(self) -> bytes:
        data, self._pending = self._pending, b""
        return data or self._read_raw()

    def _read_raw(self) -> bytes:
        if self._raw_done:
            return b""
        data = self._raw.read(self._input_bytes)
        if not data:
            self._raw_done = True
        return data
