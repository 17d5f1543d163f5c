from collections.abc import Buffer
from typing import Any

class Field:
    """One field of a compact-protocol struct."""

    id: int
    type: int
    value: Any  # int, float, bytes, bool, list[Field] (struct), tuple[int, list] (list/set/map)
    def __init__(self, id: int, type: int, value: Any) -> None: ...

def decode(data: Buffer, /) -> list[Field]: ...
def encode(fields: list[Any], /) -> bytes: ...
