"""A gzip object's text as it is read: every line before a cut is handed out first.

``gzip.GzipFile.read(n)`` raises when the stream breaks inside the ``n`` bytes asked for, and the
bytes it had decoded in that call are gone: a truncated object lost up to a whole block of good
lines (8 MiB here), and an object of one member followed by a few bytes that are not gzip lost all
of them, although ``gunzip`` recovers the member. Here a :meth:`Gunzip.read` returns what was
decoded up to such a break, and the next one raises it, so the parse task loads every line before
it and its quarantine record names the first line that was not read.

A member whose data fails zlib's checks (a bad code, its CRC-32 or length) is another matter: its
text may be wrong from well before the error (a flipped bit can decode to other, valid-looking JSON
until the trailer's CRC catches it). Its text in the read that fails is dropped, as ``GzipFile``
dropped it, and the error says that the text of that member read before (earlier 8 MiB blocks of a
large member) could not be checked.

The members of an object are decoded one after the other (RFC 1952 section 2.2: a gzip file is a
series of members); zero bytes after a member are padding (as ``gzip`` and ``gunzip`` take them),
before the first they are not gzip. A read returns at most the bytes asked for and holds them in one
buffer, whatever the compression ratio or the number of members: memory follows the block.
"""

from __future__ import annotations

import zlib
from typing import BinaryIO

MAGIC = b"\x1f\x8b"
# compressed bytes handed to zlib at a time: at each member's end zlib copies what is left of them, so
# an object of one small member per line costs this per line (1 MiB made it 3x slower than GzipFile)
INPUT_BYTES = 64 * 1024
# zlib's window bits for a gzip header and trailer (zlib.decompressobj's documentation)
GZIP_WBITS = 16 + zlib.MAX_WBITS


class NotGzip(OSError):
    """Bytes where a gzip member should start are something else."""


class Truncated(EOFError):
    """The object ends inside a gzip member."""


class Corrupt(OSError):
    """A member's data failed zlib's checks: its text may be wrong from before the error."""


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
        first read that has nothing decoded before it; a corrupt member's text in the read it fails
        in is dropped (text of members it completed is kept)."""
        limit = size if size > 0 else 64 * 1024 * 1024
        out = bytearray()
        checked = 0  # the end of the text of members completed (CRC-32 and length matched) in this read
        while len(out) < limit and not self._done and self._broken is None:
            try:
                out += self._decode(limit - len(out))
            except zlib.error as exc:
                self._broken = Corrupt(
                    f"gzip member {self.members} is corrupt ({exc}): none of its text in this block is loaded,"
                    " and its text read before (earlier blocks) could not be checked"
                )
                self._broken.__cause__ = exc
                del out[checked:]
                break
            except (OSError, EOFError) as exc:
                self._broken = exc
                break
            if self._member is None:
                checked = len(out)
        if not out and self._broken is not None:
            raise self._broken
        return bytes(out)

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
            if self.members:  # zero bytes after a member are padding
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
