"""A merge of parts on S3, done by S3: the output file's bytes are copied between objects by S3
itself, and only the parts' footers and the new footer pass through the merging process.

A concatenation (:mod:`glue_processor.write.concat`) is the parts' row-group bytes in order, then a
footer listing every row group at its new offset. On S3 the merge read every part and sent every
byte again: at the seed's load (~700 GB of NDJSON an hour, a few hundred GB of Parquet) that is each
output byte downloaded and uploaded once more, on the driver when a batch has only a few files to
merge (``write.stage.DRIVER_CONCATS``). Here each part's footer is read with one ranged GET (its
last :data:`FOOTER_GUESS` bytes, a second GET when the footer is longer), the new footer is planned
from them, and the file is one multipart upload: a part copied by S3 (``UploadPartCopy`` with a
byte range) for each part's row groups, then the footer (:meth:`S3Store.compose`). S3 takes a part
of 5 MiB or more but the last; the parts are an eighth of the target file size (16 MiB by default),
and a smaller one is put last so that it goes with the footer. Where S3's limits do not allow it (two
parts under 5 MiB), the merge copies the bytes as before.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from glue_processor.read.objects import MIN_PART_BYTES, ObjectStore, Range, S3Store
from glue_processor.read.task import Staged
from glue_processor.table.footer import MAGIC, metadata_of
from glue_processor.write.concat import ConcatError, plan_concat

# The bytes read from a part's end to find its footer in one request (a footer of 281 columns and a
# few row groups is ~60-100 KB; a longer one takes a second GET).
FOOTER_GUESS = 256 * 1024
# Parts whose footers are read at once.
READS_IN_FLIGHT = 8


def remote_footer(store: ObjectStore, uri: str, size: int) -> tuple[bytes, int]:
    """(the footer, the offset where it starts) of the Parquet object ``uri`` of ``size`` bytes, by
    ranged reads of its end."""
    if size < 12:
        raise ConcatError(f"{uri}: too short to be Parquet")
    first = max(0, size - FOOTER_GUESS)
    with store.open(uri, start=first, length=size - first) as got:
        end = got.stream.read()
    if len(end) != size - first or end[-4:] != MAGIC:
        raise ConcatError(f"{uri}: not {size} bytes ending in PAR1")
    (length,) = struct.unpack("<I", end[-8:-4])
    start = size - 8 - length
    if start < len(MAGIC):
        raise ConcatError(f"{uri}: footer length {length} does not fit in {size} bytes")
    if start >= first:
        return end[start - first : -8], start
    with store.open(uri, start=start, length=length) as got:
        return got.stream.read(), start


def composed(
    parts: Sequence[Staged], uri: str, keys: tuple[str, ...], partition: str, stores: Callable[[str], ObjectStore]
) -> Staged | None:
    """The file ``uri`` made by S3 from ``parts`` (files of one schema on S3, as the parse tasks
    stage them); None when the target or a part is not on S3, or S3's part sizes do not allow it
    (the caller concatenates them itself then)."""
    target = stores(uri)
    if not isinstance(target, S3Store) or not all(isinstance(stores(p.uri), S3Store) for p in parts):
        return None
    # a part under S3's smallest part size can only be the last (it goes with the footer)
    ordered = sorted(parts, key=lambda p: p.bytes < MIN_PART_BYTES)
    if sum(p.bytes < MIN_PART_BYTES for p in ordered) > 1:
        return None
    with ThreadPoolExecutor(max_workers=min(READS_IN_FLIGHT, len(ordered))) as pool:
        footers = list(pool.map(lambda p: remote_footer(stores(p.uri), p.uri, p.bytes), ordered))
    plan = plan_concat(footers, [p.uri for p in ordered])
    ranges = [Range(ordered[x.source].uri, x.offset, x.length) for x in plan.pieces]
    if not target.compose(uri, ranges, plan.tail):
        return None
    if metadata_of(plan.footer).num_rows != plan.rows:
        raise ValueError(f"{uri}: composed file does not read back {plan.rows} rows")
    return Staged(uri, plan.size, keys, plan.footer, partition)
