from collections.abc import Buffer, Sequence

# (body, rows, nulls) per page
Page = tuple[bytes, int, int]
# an Arrow string array: offsets, data, validity (None: no NULL), offset, length
Chunk = tuple[Buffer, Buffer, Buffer | None, int, int]

def encode_strings(
    chunks: Sequence[Chunk], page_bytes: int, /
) -> tuple[list[Page], int, bytes | None, bytes | None, int]: ...
