from collections.abc import Sequence

MAX_DEPTH: int
MAX_LINE_KEYS: int
MAX_SCAN_KEYS: int

class Buffer:
    """Read-only memory of a scan's result (the buffer protocol); freed with the object."""

Column = tuple[Buffer, Buffer, Buffer | None, int]
Extra = tuple[bytes, bytes, int, bytes, bytes, bytes, bytes, int]

def scan(
    data: bytes | bytearray | memoryview,
    known: Sequence[str],
    room: int,
    /,
    *,
    first_line: int = 1,
    max_cells: int = 0,
) -> tuple[
    list[str], list[Column | None], Buffer, int, list[tuple[int, int, int, int]], Extra | None, int, int, int
]: ...
def newlines(data: bytes | bytearray | memoryview, start: int = 0, end: int = ..., /) -> int: ...

class Framer:
    line: int
    open_array: int
    def __init__(self, max_record: int, first_line: int = 1) -> None: ...
    def feed(self, block: bytes | bytearray | memoryview, /) -> tuple[bytes, bytes, list[tuple[int, int, bytes]]]: ...
    def finish(self) -> tuple[bytes, bytes, list[tuple[int, int, bytes]]]: ...

def sniff(head: bytes | bytearray | memoryview, /) -> int: ...
