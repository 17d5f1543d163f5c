"""The dedupe index: object versions ingested within the window, kept compactly on the driver.

At the seed's load a 24 h window holds ~5 million object versions. As Python tuples of strings that
is gigabytes, and rebuilding it on restart means reading a day of commit records. Here each
identity is a 128-bit digest (two ``uint64``), stored in sorted numpy segments (one per batch of
the current half hour, one per earlier half hour); a lookup is one ``searchsorted`` per segment for
the whole batch's identities, and expiry drops whole segments, so memory is proportional to the
window, never to the history.
The index is written as one snapshot file every so many batches, so a restart loads it and reads
only the commit records written after it.

A digest collision (two versions with the same 128 bits; odds ~1e-26 for 5 million) would make
an object look ingested: it would be recorded as a ``duplicate`` in the ledger, never silently lost.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

logger = logging.getLogger(__name__)
SNAPSHOT = "_dedupe/index.npz"
# The time a segment spans: batches committed within one such slot share a segment.
SEGMENT_SPAN_S = 1800.0


def digest(identity: Sequence[str]) -> tuple[int, int]:
    """128 bits of an identity tuple (bucket, key, version...), as two unsigned 64-bit ints."""
    h = hashlib.blake2b(digest_size=16)
    for part in identity:
        h.update(part.encode("utf-8"))
        h.update(b"\x00")
    raw = h.digest()
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


@dataclass
class _Segment:
    slot: int  # floor(committed_at / SEGMENT_SPAN_S) of its batches
    hi: npt.NDArray[np.uint64]
    lo: npt.NDArray[np.uint64]
    batch: npt.NDArray[np.int64]

    @staticmethod
    def of(hi: npt.NDArray[np.uint64], lo: npt.NDArray[np.uint64], batch: npt.NDArray[np.int64], slot: int) -> _Segment:
        order = np.lexsort((lo, hi))
        return _Segment(slot, hi[order], lo[order], batch[order])

    @property
    def nbytes(self) -> int:
        return int(self.hi.nbytes + self.lo.nbytes + self.batch.nbytes)


class DedupeIndex:
    """identity -> batch id that ingested it, for the batches of the window."""

    def __init__(self) -> None:
        self._segments: list[_Segment] = []  # oldest first

    def __len__(self) -> int:
        return sum(len(s.hi) for s in self._segments)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self._segments)

    def add_batch(self, batch_id: int, committed_at: datetime, identities: Iterable[Sequence[str]]) -> None:
        pairs = [digest(i) for i in identities]
        if not pairs:
            return
        arr = np.array(pairs, dtype=np.uint64).reshape(-1, 2)
        self.add_digests(batch_id, committed_at, arr[:, 0].copy(), arr[:, 1].copy())

    def add_digests(
        self, batch_id: int, committed_at: datetime, hi: npt.NDArray[np.uint64], lo: npt.NDArray[np.uint64]
    ) -> None:
        """Add one batch's digests. A batch is a segment of its own until its slot closes; then the
        slot's batches are compacted into one sorted segment (one sort per slot, not per batch)."""
        slot = int(committed_at.timestamp() // SEGMENT_SPAN_S)
        batch = np.full(len(hi), batch_id, dtype=np.int64)
        closed = [s for s in self._segments if s.slot < slot]
        if len({s.slot for s in closed}) < len(closed):
            self._segments = [*_compact(closed), *(s for s in self._segments if s.slot >= slot)]
        self._segments.append(_Segment.of(hi, lo, batch, slot))

    def expire(self, horizon: datetime) -> None:
        """Forget the segments wholly older than ``horizon`` (so up to one span longer than asked)."""
        cut = int(horizon.timestamp() // SEGMENT_SPAN_S)
        self._segments = [s for s in self._segments if s.slot >= cut]

    def lookup(self, identities: Sequence[Sequence[str]]) -> list[int | None]:
        """The batch that ingested each identity, or None; one vectorised search per segment."""
        if not identities:
            return []
        q = np.array([digest(i) for i in identities], dtype=np.uint64).reshape(-1, 2)
        found = np.full(len(q), -1, dtype=np.int64)
        for seg in self._segments:
            pos = np.searchsorted(seg.hi, q[:, 0])
            pos = np.minimum(pos, len(seg.hi) - 1)
            hit = (seg.hi[pos] == q[:, 0]) & (seg.lo[pos] == q[:, 1]) & (seg.batch[pos] >= 0)
            found = np.where(hit, seg.batch[pos], found)
        return [int(b) if b >= 0 else None for b in found]

    def forget(self, batch_id: int, identities: Iterable[Sequence[str]]) -> int:
        """Forget that ``batch_id`` ingested these identities (its table abandoned their share: a
        requeue must load them); how many were found. Each becomes a tombstone (batch -1), dropped
        when its slot is compacted."""
        pairs = [digest(i) for i in identities]
        if not pairs:
            return 0
        q = np.array(pairs, dtype=np.uint64).reshape(-1, 2)
        forgotten = 0
        for seg in self._segments:
            if not len(seg.hi):
                continue
            lo_pos = np.searchsorted(seg.hi, q[:, 0], side="left")
            hi_pos = np.searchsorted(seg.hi, q[:, 0], side="right")
            for want_lo, start, end in zip(q[:, 1], lo_pos, hi_pos, strict=True):
                for i in range(int(start), int(end)):  # the entries with this digest's high half
                    if seg.lo[i] == want_lo and seg.batch[i] == batch_id:
                        seg.batch[i] = -1
                        forgotten += 1
        return forgotten

    def __contains__(self, identity: object) -> bool:
        return isinstance(identity, tuple) and self.lookup([identity])[0] is not None

    def __getitem__(self, identity: Sequence[str]) -> int:
        batch = self.lookup([identity])[0]
        if batch is None:
            raise KeyError(identity)
        return batch

    # -- snapshot -----------------------------------------------------------------------------
    def to_bytes(self, *, keys: Iterable[str] | Mapping[str, Iterable[str]], at: datetime) -> bytes:
        """One file: every segment, the job's known keys (per table), and the time it covers up to."""
        tables = keys if isinstance(keys, Mapping) else {"": keys}
        arrays: dict[str, npt.NDArray[np.generic]] = {
            "at": np.array([at.timestamp()], dtype=np.float64),
            "keys": np.array([json.dumps({t: sorted(k) for t, k in sorted(tables.items())})]),
            "slots": np.array([s.slot for s in self._segments], dtype=np.int64),
        }
        for n, s in enumerate(self._segments):
            arrays[f"hi{n}"], arrays[f"lo{n}"], arrays[f"b{n}"] = s.hi, s.lo, s.batch
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> tuple[DedupeIndex, dict[str, set[str]], datetime]:
        """The index, the known keys per table (a snapshot from before routing: table ""), and the
        time the snapshot covers up to."""
        with np.load(io.BytesIO(data)) as z:
            at = float(z["at"][0])
            raw = json.loads(str(z["keys"][0]))
            keys = {t: set(k) for t, k in raw.items()} if isinstance(raw, dict) else {"": set(raw)}
            index = cls()
            for n, slot in enumerate(z["slots"]):
                index._segments.append(_Segment(int(slot), z[f"hi{n}"], z[f"lo{n}"], z[f"b{n}"]))
        return index, keys, datetime.fromtimestamp(at, UTC)


def _compact(segments: list[_Segment]) -> list[_Segment]:
    """One sorted segment per slot."""
    out: list[_Segment] = []
    for slot in sorted({s.slot for s in segments}):
        group = [s for s in segments if s.slot == slot]
        if len(group) == 1:
            out.append(group[0])
            continue
        batch = np.concatenate([g.batch for g in group])
        live = batch >= 0  # tombstones (forgotten entries) go
        out.append(
            _Segment.of(
                np.concatenate([g.hi for g in group])[live],
                np.concatenate([g.lo for g in group])[live],
                batch[live],
                slot,
            )
        )
    return out


def save_snapshot(
    output_uri: str, index: DedupeIndex, keys: Iterable[str] | Mapping[str, Iterable[str]], *, at: datetime
) -> None:
    """Write the index as one object under the output (atomically); a failure is logged, never
    raised: without a snapshot a restart reads the whole window's commit records instead."""
    from glue_processor.shared.objects import store_for

    uri = f"{output_uri}/{SNAPSHOT}"
    try:
        with store_for(uri).writer(uri) as path:
            path.write_bytes(index.to_bytes(keys=keys, at=at))
    except Exception:
        logger.exception("dedupe snapshot not written", extra={"uri": uri})


def load_snapshot(output_uri: str) -> tuple[DedupeIndex, dict[str, set[str]], datetime] | None:
    """The latest snapshot, or None when there is none (or it cannot be read: logged)."""
    from glue_processor.shared.objects import ObjectMissing, store_for

    uri = f"{output_uri}/{SNAPSHOT}"
    try:
        return DedupeIndex.from_bytes(store_for(uri).read(uri).data)
    except ObjectMissing:
        return None
    except Exception:
        logger.exception("dedupe snapshot unreadable; rebuilding from the commit records", extra={"uri": uri})
        return None
