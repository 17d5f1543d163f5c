from collections.abc import Sequence

MAX_DEPTH: int

class Buffer:
    """Read-only memory of a scan's result (the buffer protocol); freed with the object."""

Column = tuple[Buffer, Buffer, Buffer | None, int]
Extra = tuple[bytes, bytes, int, bytes, bytes, bytes, bytes, int]

def scan(
    data: bytes | bytearray | memoryview, known: Sequence[str], room: int, /
) -> tuple[list[str], list[Column | None], Buffer, int, list[tuple[int, int, int, int]], Extra | None]: ...
def newlines(data: bytes | bytearray | memoryview, start: int = 0, end: int = ..., /) -> int: ...
