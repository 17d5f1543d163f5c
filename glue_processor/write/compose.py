"""A merge of parts on S3, done by S3: the output file's bytes are copied between objects by S3
itself, and only the parts' footers and the new footer pass through the merging process.

A concatenation (:mod:`glue_processor.write.concat`) is the parts' row-group bytes in order, then a
footer listing every row group at its new offset. On S3 the merge read every part and sent every
byte again: at the seed's load (~700 GB of NDJSON an hour, a few hundred GB of Parquet) that is each
output byte downloaded and uploaded once more, on the driver when a batch has only a few files to
merge (``write.stage.DRIVER_CONCATS``). Here each part's footer is read with one ranged GET (its
last :data:`FOOTER_GUESS` bytes, a second GET when the footer is longer), the new footer is planned
from them, and the file is one multipart upload: a part copied by S3 (``UploadPartCopy`` with a
byte range, of the version whose footer was read) for each part's row groups, then the footer
(:meth:`~glue_processor.shared.objects.S3Store.compose`). S3 takes a part
of 5 MiB or more but the last; the parts are an eighth of the target file size (16 MiB by default),
and a smaller one is put last so that it goes with the footer. A partition's rows from shared files
(re-encoded here, a local file) are sent with the footer too. Where S3's limits do not allow it (two
parts under 5 MiB), the merge copies the bytes as before.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from glue_processor.read.parts import Staged
from glue_processor.shared.objects import MIN_PART_BYTES, S3_SCHEMES, ObjectStore, Range
from glue_processor.table.footer import MAGIC, footer_at, metadata_of
from glue_processor.write.concat import ConcatError, plan_concat

# The bytes read from a part's end to find its footer in one request (a footer of 281 columns and a
# few row groups is ~60-100 KB; a longer one takes a second GET).
FOOTER_GUESS = 256 * 1024
# Parts whose footers are read at once.
READS_IN_FLIGHT = 8


def remote_footer(store: ObjectStore, uri: str, size: int) -> tuple[bytes, int, str | None]:
    """(the footer, the offset where it starts, the eTag of the version read) of the Parquet object
    ``uri`` of ``size`` bytes, by ranged reads of its end (the second of the same version)."""
    if size < 12:
        raise ConcatError(f"{uri}: too short to be Parquet")
    first = max(0, size - FOOTER_GUESS)
    with store.open(uri, start=first, length=size - first) as got:
        end, etag = got.stream.read(), got.etag
    if len(end) != size - first or end[-4:] != MAGIC:
        raise ConcatError(f"{uri}: not {size} bytes ending in PAR1")
    (length,) = struct.unpack("<I", end[-8:-4])
    start = size - 8 - length
    if start < len(MAGIC):
        raise ConcatError(f"{uri}: footer length {length} does not fit in {size} bytes")
    if start >= first:
        return end[start - first : -8], start, etag
    with store.open(uri, etag=etag, start=start, length=length) as got:
        return got.stream.read(), start, etag


def composed(
    parts: Sequence[Staged],
    uri: str,
    keys: tuple[str, ...],
    partition: str,
    stores: Callable[[str], ObjectStore],
    *,
    extra: Path | None = None,
) -> Staged | None:
    """The file ``uri`` made by S3 from ``parts`` (files of one schema on S3, as the parse tasks
    stage them), then the row groups of the local file ``extra`` (a partition's rows from shared
    files, sent with the footer); None when the target or a part is not on S3, or S3's part sizes do
    not allow it (the caller concatenates them itself then). A ConcatError before anything is
    written when the files do not concatenate (another schema)."""
    # the store may be a write task's (write.uploads), which hands compose to S3's
    compose = getattr(stores(uri), "compose", None)
    if compose is None or not parts or not all(on_s3(u) for u in (uri, *(p.uri for p in parts))):
        return None
    with ThreadPoolExecutor(max_workers=min(READS_IN_FLIGHT, len(parts))) as pool:
        found = list(pool.map(lambda p: remote_footer(stores(p.uri), p.uri, p.bytes), parts))
    # a part's row groups are one copy, which S3 takes at 5 MiB or more unless it is the last: one
    # smaller part goes last (with the footer), then parts without row groups (no copy at all); the
    # first in the order gives the file its PAR1, so an empty one is never first but when all are
    runs = [start - len(MAGIC) for _, start, _ in found]
    if sum(0 < n < MIN_PART_BYTES for n in runs) > 1:
        return None
    order = sorted(range(len(parts)), key=lambda i: (runs[i] < MIN_PART_BYTES, runs[i] == 0))
    footers = [found[i][:2] for i in order]
    names: list[object] = [parts[i].uri for i in order]
    run = b""  # the extra file's row groups: they go just before the footer, sent with it
    if extra is not None:
        with extra.open("rb") as f:
            footer, start = footer_at(f, extra.stat().st_size)
            f.seek(len(MAGIC))
            run = f.read(start - len(MAGIC))
        footers.append((footer, start))
        names.append(extra)
    plan = plan_concat(footers, names)
    pieces, tail = list(plan.pieces), run + plan.tail
    if extra is not None:
        pieces.pop()  # its run, read above
    ranges = [Range(parts[order[x.source]].uri, x.offset, x.length, found[order[x.source]][2]) for x in pieces]
    if not compose(uri, ranges, tail):
        return None
    if metadata_of(plan.footer).num_rows != plan.rows:
        raise ValueError(f"{uri}: composed file does not read back {plan.rows} rows")
    return Staged(uri, plan.size, keys, plan.footer, partition)


def on_s3(uri: str) -> bool:
    return uri.partition("://")[0] in S3_SCHEMES
