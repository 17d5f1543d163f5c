from collections.abc import Sequence

MAX_DEPTH: int

Column = tuple[bytes, bytes, bytes | None, int]
Extra = tuple[bytes, bytes, int, bytes, bytes, bytes, bytes, int]

def scan(
    data: bytes | bytearray | memoryview, known: Sequence[str], room: int, /
) -> tuple[list[str], list[Column | None], bytes, int, list[tuple[int, int, int, int]], Extra | None]: ...
